package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// IdentityInput is a file or directory of the host whose content is part
// of the identity of a run that uses an arm (Arm.IdentityInputs): resume
// refuses a run whose inputs changed since it was requested, naming the
// input.
type IdentityInput struct {
	// Name says what the input is to the arm ("agent dir", "skill dir",
	// "Claude Code CLI"); with the harness name it names the input in
	// resume's refusal. It never holds a path: a run resumed on another
	// machine, from another directory, is the same run.
	Name string
	// Path is the file or directory on this machine.
	Path string
}

// HashInput is the content hash (hex SHA-256) of an identity input: of a
// regular file, its bytes (cached by path, size and mtime, as the CLI
// binaries are hashed for their images); of a directory, the relative
// paths and contents of every regular file under it. Anything else is an
// error naming the path.
func HashInput(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	switch {
	case fi.IsDir():
		return hashDir(p)
	case fi.Mode().IsRegular():
		return binaryHash(p)
	}
	return "", fmt.Errorf("%s: not a regular file or a directory", p)
}

// skillDir is the directory of a skill reference as LoadSkill resolves
// it: relative to baseDir, the directory of a SKILL.md path.
func skillDir(baseDir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	p = filepath.Clean(p)
	if filepath.Base(p) == "SKILL.md" {
		p = filepath.Dir(p)
	}
	return p
}

// IdentityInputs: the task's own solution is part of its revision.
func (a oracleArm) IdentityInputs(string, func(string) string) ([]IdentityInput, error) {
	return nil, nil
}

// IdentityInputs: the template is the harness name; the host command it
// names is the operator's, outside what proctor can hash.
func (a commandArm) IdentityInputs(string, func(string) string) ([]IdentityInput, error) {
	return nil, nil
}

// IdentityInputs: the agent directory copied into every cell.
func (a agentArm) IdentityInputs(baseDir string, _ func(string) string) ([]IdentityInput, error) {
	return []IdentityInput{{Name: "agent dir", Path: a.ref.AgentDir(baseDir)}}, nil
}

// IdentityInputs: the forbidden skill of docker-probe:<skill-path>. The
// probe program is proctor itself, whose version is no part of a run's
// identity.
func (a probeArm) IdentityInputs(baseDir string, _ func(string) string) ([]IdentityInput, error) {
	if a.ref.Arg == "" {
		return nil, nil
	}
	return []IdentityInput{{Name: "skill dir", Path: a.ref.AgentDir(baseDir)}}, nil
}

// IdentityInputs: the pinned CLI binary the cells run, and the skill of
// docker-claude-skill:<skill-path>.
func (a claudeArm) IdentityInputs(baseDir string, getenv func(string) string) ([]IdentityInput, error) {
	bin, err := ClaudeBinary(baseDir, getenv)
	if err != nil {
		return nil, err
	}
	in := []IdentityInput{{Name: "Claude Code CLI", Path: bin}}
	if a.withSkill() {
		in = append(in, IdentityInput{Name: "skill dir", Path: skillDir(baseDir, a.ref.Arg)})
	}
	return in, nil
}

// IdentityInputs: none; the installed harbor is the operator's, not
// pinned by proctor.
func (a harborArm) IdentityInputs(string, func(string) string) ([]IdentityInput, error) {
	return nil, nil
}

// IdentityInputs: the path of benchflow-skill:<agent>:<path> (a skill
// directory, its SKILL.md's directory, or a root of skill directories) or
// the skill-creator of benchflow-selfgen; the installed bench is the
// operator's.
func (a benchflowArm) IdentityInputs(baseDir string, _ func(string) string) ([]IdentityInput, error) {
	_, p, err := a.parts()
	if err != nil || p == "" {
		return nil, err
	}
	if a.ref.Kind == BenchFlowSelfGen {
		return []IdentityInput{{Name: "skill creator", Path: a.abs(baseDir, p)}}, nil
	}
	return []IdentityInput{{Name: "skill dir", Path: skillDir(baseDir, p)}}, nil
}
