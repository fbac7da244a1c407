package isoprobe

import (
	"os"
	"path"
	"sort"
	"strings"
)

// skillHomeDirs are where the agents proctor runs look for skills and
// plugins, relative to a home directory (Claude Code's user skills and
// plugins, Codex's, the agents-standard directory).
var skillHomeDirs = []string{".claude/skills", ".claude/plugins", ".codex/skills", ".agents/skills", ".config/claude/skills"}

// skillWorkDirs are where a project offers skills, relative to the
// agent's working directory.
var skillWorkDirs = []string{".claude/skills", ".agents/skills", ".codex/skills", "skills"}

// SkillPlaces are the directories a skill could be offered in to an agent
// of this sandbox: places (the host's: where proctor's skill arms install
// one), each home's skillHomeDirs, the working directory's skillWorkDirs,
// $CLAUDE_CONFIG_DIR/skills and $CODEX_HOME/skills; sorted, each once.
func SkillPlaces(cfg Config, env map[string]string, places []string) []string {
	set := map[string]bool{}
	for _, p := range places {
		set[path.Clean(p)] = true
	}
	for _, h := range agentHomes(cfg, env) {
		for _, d := range skillHomeDirs {
			set[path.Join(h, d)] = true
		}
	}
	if cfg.Workdir != "" {
		for _, d := range skillWorkDirs {
			set[path.Join(cfg.Workdir, d)] = true
		}
	}
	for _, k := range []string{"CLAUDE_CONFIG_DIR", "CODEX_HOME"} {
		if v := env[k]; strings.HasPrefix(v, "/") {
			set[path.Join(v, "skills")] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// forbiddenSkill opens tr when the agent can read the skill cfg.Forbid
// names by absolute path: its host directory or any of its files at the
// host's paths, or an entry of its name in a place a skill is offered
// (SkillPlaces with cfg.Forbid.Places). The walk (walkFiles) finds its
// files' contents anywhere else. It does nothing without cfg.Forbid.
func forbiddenSkill(cfg Config, env map[string]string, tr *Finding) {
	fb := cfg.Forbid
	if fb == nil {
		return
	}
	open := func(format string, a ...any) {
		if tr.Status == Closed || tr.Status == NA {
			tr.Evidence = nil // the walk's "nothing visible" no longer holds
		}
		tr.Status = Open
		tr.add(format, a...)
	}
	if fb.HostDir != "" {
		if _, err := os.ReadDir(cfg.host(fb.HostDir)); err == nil {
			open("the forbidden skill's directory %s is readable at its host path", fb.HostDir)
		}
		for _, f := range fb.Files {
			p := path.Join(fb.HostDir, f.Name)
			if readable(cfg.host(p)) {
				open("the forbidden skill's %s is readable at its host path %s", f.Name, p)
			}
		}
	}
	names := append([]string{fb.Name}, fb.Names...)
	places := SkillPlaces(cfg, env, fb.Places)
	for _, pl := range places {
		for _, n := range names {
			p := path.Join(pl, n)
			if _, err := os.Lstat(cfg.host(p)); err == nil {
				open("the forbidden skill is offered at %s", p)
			}
		}
	}
	if tr.Status != Open {
		tr.info("the forbidden skill %s is not at its host path %s nor in any of %d places a skill is offered", fb.Name, fb.HostDir, len(places))
	}
}
