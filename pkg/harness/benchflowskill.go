package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/proctor-eval/proctor/pkg/task"
)

// skillFile is the file that makes a directory a skill pack (the Agent
// Skills layout BenchFlow deploys: <root>/<pack>/SKILL.md).
const skillFile = "SKILL.md"

// skillPacks resolves the <path> of benchflow-skill:<agent>:<path> to the
// skill packs it names, as absolute directories sorted by name: a skill
// directory (holding SKILL.md), that SKILL.md itself, or a root whose
// child directories hold SKILL.md (each such child is a pack; the others
// are not staged). A root holding none, a missing path and any other file
// are errors naming the path.
func skillPacks(p string) ([]string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		if filepath.Base(p) != skillFile || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is a file but not a %s: name a skill directory, its %s, or a root of skill directories", p, skillFile, skillFile)
		}
		return []string{filepath.Dir(p)}, nil
	}
	if isRegular(filepath.Join(p, skillFile)) {
		return []string{p}, nil
	}
	des, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var packs []string
	for _, de := range des {
		d := filepath.Join(p, de.Name())
		if isDirectory(d) && isRegular(filepath.Join(d, skillFile)) {
			packs = append(packs, d)
		}
	}
	if len(packs) == 0 {
		return nil, fmt.Errorf("%s holds no %s, neither itself nor in a child directory: it is not a skill, nor a root of skills", p, skillFile)
	}
	sort.Strings(packs)
	return packs, nil
}

// bundledPacks are the task's own skill packs (environment/skills/<pack>/
// SKILL.md), what benchflow-skill:<agent> without a path deploys.
func bundledPacks(t *task.Task) []string {
	if t.EnvironmentDir == "" {
		return nil
	}
	packs, err := skillPacks(filepath.Join(t.EnvironmentDir, "skills"))
	if err != nil {
		return nil
	}
	return packs
}

// skillCreator resolves the <dir> of benchflow-selfgen:<agent>:<dir> to
// the skill-creator directory, as BenchFlow resolves an explicit
// --skill-creator-dir (benchflow/rollout/_skills.py,
// _resolve_skill_creator_root): <dir> itself when it holds SKILL.md, else
// <dir>/skill-creator when that does, else the only child of <dir> holding
// SKILL.md. Anything else is an error: without a creator BenchFlow would
// go on to search the caller's home for one.
func skillCreator(dir string) (string, error) {
	if !isDirectory(dir) {
		if _, err := os.Stat(dir); err != nil {
			return "", err
		}
		return "", fmt.Errorf("%s is not a directory: name the skill-creator directory or a root holding it", dir)
	}
	if isRegular(filepath.Join(dir, skillFile)) {
		return dir, nil
	}
	if c := filepath.Join(dir, "skill-creator"); isRegular(filepath.Join(c, skillFile)) {
		return c, nil
	}
	packs, err := skillPacks(dir)
	if err != nil || len(packs) != 1 {
		return "", fmt.Errorf("%s holds no skill-creator: neither %s/%s, skill-creator/%s nor exactly one child with a %s", dir, filepath.Base(dir), skillFile, skillFile, skillFile)
	}
	return packs[0], nil
}

// skillNames are the names a deployed pack answers to when an agent loads
// it: its directory name and its SKILL.md frontmatter name (BenchFlow's
// parse_skill: the name key, the directory name when absent).
func skillNames(packs []string) map[string]bool {
	out := map[string]bool{}
	for _, p := range packs {
		out[filepath.Base(p)] = true
		if n := frontmatterName(filepath.Join(p, skillFile)); n != "" {
			out[n] = true
		}
	}
	return out
}

// frontmatterName is the name key of a SKILL.md's YAML frontmatter, "" when
// it has none or does not parse.
func frontmatterName(p string) string {
	b, err := readBounded(p)
	if err != nil {
		return ""
	}
	doc, err := task.SplitFrontmatter(b)
	if err != nil || !doc.HasFrontmatter {
		return ""
	}
	var m map[string]any
	if yaml.Unmarshal([]byte(doc.Frontmatter), &m) != nil {
		return ""
	}
	if v, ok := m["name"]; ok && v != nil {
		return strings.TrimSpace(fmt.Sprint(v))
	}
	return ""
}

func isRegular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isDirectory(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// stageCopy copies the tree src to dst as real files. src itself may be a
// symlink (it is read through); a symlink inside it is copied as what it
// points to when that stays inside src, and is an error otherwise, so a
// staged pack never carries its neighbours.
func stageCopy(src, dst string) error {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out := filepath.Join(dst, rel)
		real := p
		if d.Type()&fs.ModeSymlink != 0 {
			if real, err = filepath.EvalSymlinks(p); err != nil {
				return err
			}
			if r, _ := filepath.Rel(root, real); r == ".." || strings.HasPrefix(r, "../") {
				return fmt.Errorf("%s links outside %s", rel, filepath.Base(src))
			}
		}
		fi, err := os.Stat(real)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if d.Type()&fs.ModeSymlink != 0 {
				return stageCopy(real, out)
			}
			return os.MkdirAll(out, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", rel)
		}
		in, err := os.Open(real)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// rubricRefusal is why BenchFlow would not take the task because of its
// review rubric, or "": BenchFlow discovers a task directory only when its
// checks pass (benchflow/evaluation.py _is_task_dir, _utils/task_authoring
// check_task), and a rubric.json in the verifier directory that claims the
// review contract but is not a valid rubric fails them
// (_check_review_rubric: "<dir>/rubric.json invalid: ..."), so bench would
// run nothing. The verifier directory is verifier/ when it exists, else
// tests/, as BenchFlow's TaskPaths reads it.
func rubricRefusal(t *task.Task) string {
	dir := "tests"
	if isDirectory(filepath.Join(t.Dir, "verifier")) {
		dir = "verifier"
	}
	p := filepath.Join(t.Dir, dir, "rubric.json")
	if !isRegular(p) {
		return ""
	}
	b, err := readBounded(p)
	if err != nil {
		return fmt.Sprintf("%s/rubric.json invalid: %v (BenchFlow does not discover a task whose review rubric it rejects)", dir, err)
	}
	if why := reviewRubricError(b); why != "" {
		return fmt.Sprintf("%s/rubric.json invalid: %s (BenchFlow does not discover a task whose review rubric it rejects)", dir, why)
	}
	return ""
}

// rubricNameRe is a Python identifier (ASCII; BenchFlow's
// str.isidentifier also takes Unicode letters, which no rubric here uses).
var rubricNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// pythonKeywords are the names str.isidentifier accepts that keyword
// refuses.
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// baseModelAttrs are attributes of pydantic's BaseModel a criterion name
// may not shadow (benchflow/review/config.py, hasattr(BaseModel, name)).
var baseModelAttrs = map[string]bool{
	"copy": true, "dict": true, "json": true, "parse_obj": true, "parse_raw": true, "parse_file": true,
	"from_orm": true, "construct": true, "schema": true, "schema_json": true, "validate": true,
	"update_forward_refs": true,
}

// reviewRubricError checks a rubric.json as BenchFlow's review contract
// does (benchflow/review/config.py: is_review_rubric_file, Rubric,
// RubricCriterion; BenchFlow 0.7): it returns why BenchFlow rejects it, or
// "" when it is a valid rubric or not a review rubric at all (the
// llm-judge dialect, every criterion carrying id and match_criteria).
func reviewRubricError(b []byte) string {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // 1.0 is not a strict integer to BenchFlow
	if err := dec.Decode(&doc); err != nil {
		return "not valid JSON: " + err.Error()
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return "not a JSON object"
	}
	crit, ok := obj["criteria"].([]any)
	if !ok {
		return "criteria must be a list"
	}
	judge := len(crit) > 0
	for _, c := range crit {
		m, ok := c.(map[string]any)
		_, hasID := m["id"]
		_, hasMatch := m["match_criteria"]
		judge = judge && ok && hasID && hasMatch
	}
	if judge {
		return "" // the llm-judge dialect: not BenchFlow's review rubric
	}
	for k := range obj {
		if k != "criteria" {
			return fmt.Sprintf("unexpected key %q (only criteria is allowed)", k)
		}
	}
	if len(crit) == 0 {
		return "criteria must hold at least one criterion"
	}
	seen := map[string]bool{}
	legacy, weighted, scored := 0, 0, 0
	for i, c := range crit {
		m, ok := c.(map[string]any)
		if !ok {
			return fmt.Sprintf("criteria[%d] is not an object", i)
		}
		for k := range m {
			switch k {
			case "name", "description", "guidance", "blocker", "weight":
			default:
				return fmt.Sprintf("criteria[%d]: unexpected key %q", i, k)
			}
		}
		for _, k := range []string{"name", "description", "guidance"} {
			if _, ok := m[k].(string); !ok {
				return fmt.Sprintf("criteria[%d].%s must be a string", i, k)
			}
		}
		name := m["name"].(string)
		switch {
		case !rubricNameRe.MatchString(name) || pythonKeywords[name]:
			return fmt.Sprintf("criteria[%d]: name %q must be a valid, non-keyword Python identifier", i, name)
		case strings.HasPrefix(name, "_"):
			return fmt.Sprintf("criteria[%d]: name %q must not start with '_'", i, name)
		case strings.HasPrefix(name, "model_"):
			return fmt.Sprintf("criteria[%d]: name %q must not start with 'model_'", i, name)
		case baseModelAttrs[name]:
			return fmt.Sprintf("criteria[%d]: name %q collides with a reserved schema attribute", i, name)
		case seen[name]:
			return fmt.Sprintf("criterion names must be unique; %q is duplicated", name)
		}
		seen[name] = true
		bv, hasB := m["blocker"]
		wv, hasW := m["weight"]
		if hasB != hasW {
			return fmt.Sprintf("criteria[%d] must provide both blocker and weight (v0.2) or neither (v0.1)", i)
		}
		if !hasB {
			legacy++
			continue
		}
		blocker, okB := strictInt(bv)
		weight, okW := strictInt(wv)
		if !okB || blocker < 0 || blocker > 1 {
			return fmt.Sprintf("criteria[%d].blocker must be the integer 0 or 1", i)
		}
		if !okW || weight < 1 || weight > 10 {
			return fmt.Sprintf("criteria[%d].weight must be an integer from 1 to 10", i)
		}
		weighted++
		if blocker == 0 {
			scored++
		}
	}
	if legacy > 0 && weighted > 0 {
		return "legacy v0.1 and weighted v0.2 criteria cannot be mixed"
	}
	if weighted > 0 && scored == 0 {
		return "weighted v0.2 rubrics require at least one scored (blocker: 0) criterion"
	}
	return ""
}

// strictInt is a JSON number written as an integer (pydantic's strict
// int: not 1.0, not a bool, not a string).
func strictInt(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok || strings.ContainsAny(string(n), ".eE") {
		return 0, false
	}
	i, err := n.Int64()
	return int(i), err == nil
}
