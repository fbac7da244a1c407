package isoprobe

import (
	"context"
	"strings"
	"testing"
)

// TestForbiddenSkill plays an agent in the baseline's sandbox of a
// docker-probe:<skill-path> run reaching the forbidden skill each way it
// could: at its host path, a copy of one of its files under another name,
// an entry of its name where a skill is offered. Each opens treatment;
// the sandbox without any of them is closed.
func TestForbiddenSkill(t *testing.T) {
	const ref = "Step 1: call the pdf API with --fix-everything, then check the output.\n"
	forbid := &ForbiddenSkill{
		Name: "pdf", HostDir: "/home/op/skills/pdf",
		Files:  []FileSig{sig("SKILL.md", "---\nname: pdf\ndescription: pdf tools\n---\nUse reference.md.\n"), sig("reference.md", ref)},
		Places: []string{"/opt/proctor/skills", "/opt/abskill/skills"},
	}
	for _, c := range []struct {
		name     string
		files    map[string]string
		want     string
		evidence string
	}{
		{"nothing of the skill", map[string]string{"root/.claude/skills/other/": ""}, Closed, ""},
		{"its file at its host path", map[string]string{"home/op/skills/pdf/reference.md": ref}, Open, "at its host path /home/op/skills/pdf/reference.md"},
		{"its directory at its host path, emptied", map[string]string{"home/op/skills/pdf/": ""}, Open, "directory /home/op/skills/pdf is readable"},
		{"a copy of its file renamed", map[string]string{"tmp/notes.txt": ref}, Open, "/tmp/notes.txt holds the forbidden skill pdf's reference.md"},
		{"its name in the agent's skills", map[string]string{"tmp/home/.claude/skills/pdf/": ""}, Open, "offered at /tmp/home/.claude/skills/pdf"},
		{"its name in the project's skills", map[string]string{"app/.claude/skills/pdf": "x"}, Open, "offered at /app/.claude/skills/pdf"},
		{"its name where proctor installs skills", map[string]string{"opt/proctor/skills/pdf/": ""}, Open, "offered at /opt/proctor/skills/pdf"},
		{"its name in CLAUDE_CONFIG_DIR", map[string]string{"cfg/claude/skills/pdf/": ""}, Open, "offered at /cfg/claude/skills/pdf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"app/": "", "tmp/home/": ""}
			for k, v := range c.files {
				files[k] = v
			}
			cfg := closedCfg(t, fsRoot(t, files))
			cfg.Forbid = forbid
			f := Run(context.Background(), cfg, []string{"HOME=/tmp/home", "CLAUDE_CONFIG_DIR=/cfg/claude"}).Classes[Treatment]
			ev := strings.Join(f.Evidence, "\n")
			if f.Status != c.want || !strings.Contains(ev, c.evidence) {
				t.Fatalf("treatment %s %q, want %s with %q", f.Status, ev, c.want, c.evidence)
			}
			if c.want == Open && strings.Contains(ev, "no skill is visible") {
				t.Errorf("an open treatment keeps the closed line: %q", ev)
			}
		})
	}
}
