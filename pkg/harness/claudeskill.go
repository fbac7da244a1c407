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
	"strings"

	"github.com/goccy/go-yaml"
)

// SkillPluginDir is where the skill arm puts the one-skill plugin in the
// task container (passed with --plugin-dir, removed before the verifier).
const SkillPluginDir = "/opt/abskill"

// skillPluginName is the plugin's name: the init event lists it among its
// plugins when the CLI loaded it.
const skillPluginName = "abskill"

// SkillNotice opens the prompt of the skill arm, %s being the skill's
// name: the fixed text every task gets, so the treatment is the skill and
// not a different wording of the task. It says what the task-runs seed's
// notice says: load the skill before you start, and where the skill and
// the environment disagree, trust the environment; it names no task, API
// or fix. Any change of its wording is a new SkillNoticeVersion.
const SkillNotice = "A skill named %q is installed for this task. Load it with the Skill tool before you start. " +
	"Where the skill and what you observe in the environment disagree, trust the environment.\n\n"

// SkillNoticeVersion is the version of SkillNotice's wording, recorded in
// every skill-arm row (metrics.treatment.notice_version): version 1 was
// "Use it (the Skill tool) if it helps."; 2 is the seed's meaning. Deltas
// between runs of different versions are not comparable.
const SkillNoticeVersion = 2

// skillName is what a skill's name may be: it names a directory.
var skillName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// notOfferedChar are the characters Claude Code 2.1.332 replaces by "-"
// in the name it offers a plugin skill under.
var notOfferedChar = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// SkillOfferedName is the name Claude Code 2.1.332 offers the skill arm's
// skill name under in its init event and its Skill tool: the plugin's
// name, ":", and the skill's directory name (the skill's name in the
// plugin WritePlugin writes) with every character outside [a-zA-Z0-9_-]
// replaced by "-", as the CLI derives it (a skill My_Skill.v2 is offered
// as abskill:My_Skill-v2).
func SkillOfferedName(name string) string {
	return skillPluginName + ":" + notOfferedChar.ReplaceAllString(name, "-")
}

// Skill is a loaded skill of a docker-claude-skill:<skill-path> arm.
type Skill struct {
	// Dir is the skill directory (the directory of SKILL.md).
	Dir string
	// Name is the frontmatter's name, else the directory's name.
	Name string
}

// refusedFrontmatter are frontmatter settings the skill arm refuses: each
// changes more than the skill's content (another model, a forked context,
// hooks that run commands, a skill the model may not invoke), so the
// comparison would not measure the skill.
var refusedFrontmatter = []struct {
	key  string
	when func(v any) bool
	why  string
}{
	{"model", func(any) bool { return true }, "it would run the skill on another model"},
	{"context", func(v any) bool { return fmt.Sprint(v) == "fork" }, "context: fork runs the skill in another context"},
	{"hooks", func(any) bool { return true }, "hooks run commands outside the agent's turns"},
	{"disable-model-invocation", func(v any) bool { return v == true }, "the model could not invoke the skill"},
}

// LoadSkill reads the skill at p (a directory holding SKILL.md, or the
// SKILL.md itself), relative paths against baseDir, and checks its
// frontmatter. Errors name the file and key: a missing SKILL.md, no
// frontmatter, YAML that does not parse, no description (offeredByCLI),
// a refused setting (model:, context: fork, hooks:,
// disable-model-invocation: true).
func LoadSkill(baseDir, p string) (*Skill, error) {
	dir := skillDir(baseDir, p)
	return loadSkillDir(dir, filepath.Base(dir))
}

// loadSkillDir is LoadSkill of the skill directory p whose name, when its
// frontmatter gives none, is dirName (the planned directory's name: a
// tree fetched into a node's cache is named by its digest).
func loadSkillDir(p, dirName string) (*Skill, error) {
	md := filepath.Join(p, "SKILL.md")
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("skill %s: no such directory (a skill is a directory holding SKILL.md; a relative path is taken from the directory the run was started in)", p)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		return nil, fmt.Errorf("skill %s: %w", p, err)
	}
	s := &Skill{Dir: p, Name: dirName}
	fm, ok := frontmatter(b)
	if !ok {
		return nil, fmt.Errorf("%s: no frontmatter (a first line \"---\", YAML with a description, a line \"---\"): Claude Code would load the plugin and never offer the skill", md)
	}
	var m map[string]any
	if err := yaml.Unmarshal(fm, &m); err != nil {
		return nil, fmt.Errorf("%s: frontmatter: %s", md, yaml.FormatError(err, false, true))
	}
	for _, r := range refusedFrontmatter {
		if v, ok := m[r.key]; ok && r.when(v) {
			return nil, fmt.Errorf("%s: frontmatter key %s refused: %s", md, r.key, r.why)
		}
	}
	if n, ok := m["name"].(string); ok && strings.TrimSpace(n) != "" {
		s.Name = strings.TrimSpace(n)
	}
	if !skillName.MatchString(s.Name) {
		return nil, fmt.Errorf("%s: skill name %q: want letters, digits, '.', '_' or '-' (it names the skill's directory in the plugin)", md, s.Name)
	}
	if !offeredByCLI(m) {
		return nil, fmt.Errorf("%s: frontmatter: no description (a non-blank description, or a when_to_use): Claude Code would load the plugin and never offer the skill", md)
	}
	return s, nil
}

// offeredByCLI reports whether Claude Code 2.1.332 offers a plugin skill
// of frontmatter m to the model: its description is a non-blank string, a
// number or a boolean, or its when_to_use is set and not empty (the CLI
// lists a plugin skill only with a description the author wrote or a
// when_to_use; a map or list description it drops with a warning).
func offeredByCLI(m map[string]any) bool {
	switch d := m["description"].(type) {
	case string:
		if strings.TrimSpace(d) != "" {
			return true
		}
	case bool, int, int64, uint64, float64:
		return true
	}
	w, ok := m["when_to_use"]
	return ok && w != nil && fmt.Sprint(w) != ""
}

// frontmatter returns the YAML between a leading "---" line and the next
// (trailing blanks on either line allowed, as the CLI reads them).
func frontmatter(b []byte) ([]byte, bool) {
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || strings.TrimRight(string(b[:nl]), "\r \t") != "---" {
		return nil, false
	}
	rest := b[nl+1:]
	for i := 0; i < len(rest); {
		j := bytes.IndexByte(rest[i:], '\n')
		line := rest[i:]
		if j >= 0 {
			line = rest[i : i+j]
		}
		if strings.TrimRight(string(line), "\r \t") == "---" {
			return rest[:i], true
		}
		if j < 0 {
			break
		}
		i += j + 1
	}
	return nil, false
}

// WritePlugin writes the one-skill plugin into the new directory dst:
// .claude-plugin/plugin.json naming the plugin abskill, and the skill's
// files under skills/<name>/. The skill's top-level evals/ is not copied;
// a symlink is copied as the file it points to only when that is a
// regular file inside the skill and outside its evals/ (anything else is
// left out and listed in skipped, so the treatment is exactly the skill).
func (s *Skill) WritePlugin(dst string) (skipped []string, err error) {
	if err := os.MkdirAll(filepath.Join(dst, ".claude-plugin"), 0o755); err != nil {
		return nil, err
	}
	manifest, _ := json.Marshal(map[string]string{"name": skillPluginName, "version": "0.0.0", "description": "the skill under test: " + s.Name})
	if err := os.WriteFile(filepath.Join(dst, ".claude-plugin", "plugin.json"), manifest, 0o644); err != nil {
		return nil, err
	}
	root, err := filepath.EvalSymlinks(s.Dir)
	if err != nil {
		return nil, err
	}
	evals := filepath.Join(root, "evals")
	inside := func(p string) bool {
		return (p == root || strings.HasPrefix(p, root+string(filepath.Separator))) &&
			p != evals && !strings.HasPrefix(p, evals+string(filepath.Separator))
	}
	out := filepath.Join(dst, "skills", s.Name)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if p == evals {
			skipped = append(skipped, rel+"/ (evals are not copied)")
			return filepath.SkipDir
		}
		target := filepath.Join(out, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			real, err := filepath.EvalSymlinks(p)
			if err != nil || !inside(real) {
				skipped = append(skipped, rel+" (a symlink pointing outside the skill or into evals/)")
				return nil
			}
			if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
				skipped = append(skipped, rel+" (a symlink to something other than a regular file)")
				return nil
			}
			return copyFile(real, target)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		skipped = append(skipped, rel+" (not a regular file)")
		return nil
	})
	return skipped, err
}

func copyFile(src, dst string) error { return copyFileMode(src, dst, os.O_TRUNC, 0o644) }

// copyFileMode copies the file src to dst, created with perm and opened
// with flag beside O_WRONLY|O_CREATE (O_TRUNC to replace, O_EXCL to
// refuse an existing file).
func copyFileMode(src, dst string, flag int, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|flag, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
