package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/proctor-eval/proctor/pkg/isoprobe"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// What the host tells the probe program beyond the sandbox's shape: the
// task's files to look for, the skills to protect, the environment's
// allowlist and the host values the sandbox must not hold.

// hostConfig fills cfg's TaskFiles, Protect and env fields for task t run
// in spec with the agent's variables agentVars. Only the task's files can
// fail it; an image whose ENV cannot be read leaves the names unchecked
// (logged by the caller from the returned note).
func hostConfig(ctx context.Context, env Env, d sandbox.Driver, spec sandbox.Spec, agentVars map[string]string, cfg *isoprobe.Config) (note string, err error) {
	t := env.Task()
	if cfg.TaskFiles, err = taskFileSigs(t); err != nil {
		return "", err
	}
	cfg.Protect = protectedSkills(t, env.Spec().Harnesses, env.Spec().BaseDir)
	given := map[string]string{}
	allowed, img, err := allowedEnv(ctx, d, spec, agentVars)
	if err != nil {
		note = "env names left unchecked: " + err.Error()
	}
	cfg.EnvAllowed = allowed
	for _, kv := range img {
		k, v, _ := strings.Cut(kv, "=")
		given[k] = v
	}
	for _, m := range []map[string]string{spec.Env, agentVars} {
		for k, v := range m {
			given[k] = v
		}
	}
	cfg.EnvKey, cfg.EnvValues, cfg.EnvDropped = isoprobe.SealEnv(environList(env.Getenv, credentialEnv()...), given, credentialEnv())
	return note, nil
}

// credentialEnv names the variables whose host values are a model
// provider's credentials (pkg/providers, and the Claude arms' allowlist):
// the probe looks for their values whatever the sandbox is given.
func credentialEnv() []string {
	set := map[string]bool{}
	for _, p := range providers.All() {
		for _, k := range p.CredentialEnv {
			set[k] = true
		}
		if p.HeaderEnv != "" {
			set[p.HeaderEnv] = true
		}
	}
	for _, k := range ClaudeCredentialEnv {
		set[k] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// taskFileSigs lists every regular file of the task's tests and solution
// directories, and of every step's, by size and SHA-256 (symlinks are not
// followed). A tests file whose contents the task also ships as input (a
// file of the environment's build context, skills/ left out as the build
// leaves it out, or of a step's workdir/) names that file in Input.
func taskFileSigs(t *task.Task) ([]isoprobe.FileSig, error) {
	type root struct {
		dir   string
		tests bool
	}
	roots := []root{{t.TestsDir, true}, {t.SolutionDir, false}}
	for _, s := range t.Steps {
		roots = append(roots, root{s.TestsDir, true}, root{s.SolutionDir, false})
	}
	var out []isoprobe.FileSig
	var isTest []bool
	tests := map[int64]bool{}
	seen := map[string]bool{}
	for _, r := range roots {
		if r.dir == "" || seen[r.dir] {
			continue
		}
		seen[r.dir] = true
		err := filepath.WalkDir(r.dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.Type().IsRegular() {
				return err
			}
			size, sum, err := sha256File(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(t.Dir, p)
			out = append(out, isoprobe.FileSig{Name: filepath.ToSlash(rel), Size: size, SHA256: sum})
			isTest = append(isTest, r.tests)
			if r.tests {
				tests[size] = true
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", t.Name, err)
		}
	}
	inputs, err := inputFiles(t, tests)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.Name, err)
	}
	for i := range out {
		if isTest[i] {
			out[i].Input = inputs[out[i].SHA256]
		}
	}
	return out, nil
}

// inputFiles maps the SHA-256 of each file the task ships as input (the
// environment's build context without skills/, every step's workdir/)
// whose size is in sizes to its path relative to the task directory (the
// first in walk order).
func inputFiles(t *task.Task, sizes map[int64]bool) (map[string]string, error) {
	out := map[string]string{}
	var dirs []string
	if t.EnvironmentDir != "" {
		dirs = append(dirs, t.EnvironmentDir)
	}
	for _, s := range t.Steps {
		if s.WorkdirDir != "" {
			dirs = append(dirs, s.WorkdirDir)
		}
	}
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() && d == t.EnvironmentDir && p == filepath.Join(d, "skills") {
				return fs.SkipDir // the build context holds it empty
			}
			if !de.Type().IsRegular() {
				return nil
			}
			if fi, err := de.Info(); err != nil || !sizes[fi.Size()] {
				return err
			}
			_, sum, err := sha256File(p)
			if err != nil {
				return err
			}
			if _, ok := out[sum]; !ok {
				rel, _ := filepath.Rel(t.Dir, p)
				out[sum] = filepath.ToSlash(rel)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sha256File(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// protectedSkills names the skills a run must keep from a baseline agent:
// the task's own (each directory of environment/skills holding a
// SKILL.md, at any depth) and the skill of each skill arm of the run
// (docker-claude-skill:<path>, docker-probe-skill:<path>) and each
// skill a docker-probe:<path> forbids, sorted.
func protectedSkills(t *task.Task, harnesses []string, baseDir string) []string {
	set := map[string]bool{}
	if t.EnvironmentDir != "" {
		skills := filepath.Join(t.EnvironmentDir, "skills")
		_ = filepath.WalkDir(skills, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.Type().IsRegular() && de.Name() == task.SkillFile {
				rel, _ := filepath.Rel(skills, filepath.Dir(p))
				set[filepath.ToSlash(rel)] = true
			}
			return nil
		})
	}
	for _, h := range harnesses {
		r, err := Parse(h)
		if err != nil || r.Arg == "" || (r.Kind != DockerClaudeSkill && r.Kind != DockerClaudeHostSkill && r.Kind != DockerProbe && r.Kind != DockerProbeSkill && r.Kind != DockerProbeHost) {
			continue
		}
		set[filepath.Base(r.AgentDir(baseDir))] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// allowedEnv is the agent's environment allowlist: the image's ENV (the
// driver's ImageEnver ability), the task's declared sandbox env and the
// arm's own variables; it also returns the image's ENV. nil (names
// unchecked) when the image's ENV cannot be read.
func allowedEnv(ctx context.Context, d sandbox.Driver, spec sandbox.Spec, own map[string]string) ([]string, []string, error) {
	ie, ok := d.(sandbox.ImageEnver)
	if !ok {
		return nil, nil, fmt.Errorf("the sandbox driver %T cannot read an image's ENV", d)
	}
	img, err := ie.ImageEnv(ctx, spec.Image)
	if err != nil {
		return nil, nil, err
	}
	set := map[string]bool{}
	for _, kv := range img {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, m := range []map[string]string{spec.Env, own} {
		for k := range m {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, img, nil
}
