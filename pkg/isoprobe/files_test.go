package isoprobe

import (
	"context"
	"strings"
	"testing"
)

// TestTreatmentNothingToProtect: with no skill of the arm's and none to
// protect, treatment is n/a; with the task's skills to protect and none
// visible it is closed; a skill visible opens it either way.
func TestTreatmentNothingToProtect(t *testing.T) {
	skill := map[string]string{"root/.claude/skills/pdf/SKILL.md": "---\nname: pdf\n---\n"}
	for _, c := range []struct {
		name    string
		files   map[string]string
		protect []string
		want    string
	}{
		{"no skill anywhere", nil, nil, NA},
		{"the task's skills kept out", nil, []string{"pdf"}, Closed},
		{"a skill in the image, nothing to protect", skill, nil, Open},
		{"a skill in the image, the task's to protect", skill, []string{"pdf"}, Open},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"app/": "", "tmp/home/": ""}
			for k, v := range c.files {
				files[k] = v
			}
			cfg := closedCfg(t, fsRoot(t, files))
			cfg.Protect = c.protect
			f := Run(context.Background(), cfg, nil).Classes[Treatment]
			if f.Status != c.want || len(f.Evidence) == 0 {
				t.Fatalf("treatment %+v, want %s", f, c.want)
			}
			if c.want == Open && !strings.Contains(strings.Join(f.Evidence, "\n"), "skill /root/.claude/skills/pdf is readable") {
				t.Errorf("evidence %v", f.Evidence)
			}
		})
	}
}

// TestOperatorConfigHoldings: what an operator's directory holds decides,
// not that it exists. The empty skill paths SkillsBench images make for
// every agent (COPY skills of an emptied skills/) are info; a skill there
// is treatment's; a settings file opens operator_config; an empty file is
// nothing.
func TestOperatorConfigHoldings(t *testing.T) {
	for _, c := range []struct {
		name             string
		files            map[string]string
		operator, treat  string
		evidence, infoes string
	}{
		{name: "empty skill directories", files: map[string]string{"root/.claude/skills/": "", "root/.codex/skills/": "", "root/.agents/skills/": ""},
			operator: Closed, treat: NA, infoes: "/root/.claude exists and holds no file"},
		{name: "a skill under .claude/skills", files: map[string]string{"root/.claude/skills/pdf/SKILL.md": "---\nname: pdf\n---\n", "root/.claude/skills/pdf/scripts/x.py": "print(1)\n"},
			operator: Closed, treat: Open, infoes: "/root/.claude holds only files under skills/ (skills/pdf/SKILL.md, skills/pdf/scripts/x.py)"},
		{name: "settings beside the skills", files: map[string]string{"root/.claude/skills/": "", "root/.claude/settings.json": "{\"env\":{}}"},
			operator: Open, treat: NA, evidence: "/root/.claude is readable and holds 1 files: settings.json"},
		{name: "an empty .netrc", files: map[string]string{"root/.netrc": ""}, operator: Closed, treat: NA, infoes: "/root/.netrc exists and holds no file"},
		{name: "a .netrc", files: map[string]string{"root/.netrc": "machine x login y password z\n"}, operator: Open, treat: NA, evidence: "/root/.netrc is readable and holds a file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"app/": "", "tmp/home/": ""}
			for k, v := range c.files {
				files[k] = v
			}
			rep := Run(context.Background(), closedCfg(t, fsRoot(t, files)), nil)
			op, tr := rep.Classes[OperatorConfig], rep.Classes[Treatment]
			if op.Status != c.operator || tr.Status != c.treat {
				t.Fatalf("operator_config %+v, treatment %+v; want %s, %s", op, tr, c.operator, c.treat)
			}
			if ev := strings.Join(op.Evidence, "\n"); !strings.Contains(ev, c.evidence) {
				t.Errorf("evidence %q, want %q", ev, c.evidence)
			}
			if in := strings.Join(op.Info, "\n"); !strings.Contains(in, c.infoes) {
				t.Errorf("info %q, want %q", in, c.infoes)
			}
		})
	}
}

// TestTaskFilesInput: a sandbox file with the contents of a tests file
// the task also ships as input is an info line, not a leak; the same for
// a solution file is the answer in the image (open); /tests readable is
// open whatever it holds.
func TestTaskFilesInput(t *testing.T) {
	const log = "Dec  1 10:00:01 host sshd[1]: Failed password for root from 10.0.0.9\n"
	in := sig("tests/auth.log", log)
	in.Input = "environment/auth.log"
	for _, c := range []struct {
		name  string
		files map[string]string
		sigs  []FileSig
		want  string
		info  bool
	}{
		{"the input the verifier re-reads", map[string]string{"var/log/auth.log": log}, []FileSig{in}, Closed, true},
		{"a solution file shipped in the image", map[string]string{"var/log/auth.log": log}, []FileSig{in, sig("solution/auth.log", log)}, Open, true},
		{"/tests readable", map[string]string{"var/log/auth.log": log, "tests/auth.log": log}, []FileSig{in}, Open, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"app/": "", "tmp/home/": ""}
			for k, v := range c.files {
				files[k] = v
			}
			cfg := closedCfg(t, fsRoot(t, files))
			cfg.TaskFiles = c.sigs
			f := Run(context.Background(), cfg, nil).Classes[TaskFiles]
			if f.Status != c.want {
				t.Fatalf("task_files %+v, want %s", f, c.want)
			}
			info := strings.Join(f.Info, "\n")
			if c.info != strings.Contains(info, "/var/log/auth.log holds the task's tests/auth.log, which the task ships as input too (environment/auth.log)") {
				t.Errorf("info %q", info)
			}
		})
	}
}

// TestCheckoutWalkClaudeMD: an agent's instructions above the work tree
// open checkout_walk; the task's own CLAUDE.md in the work tree does not.
func TestCheckoutWalkClaudeMD(t *testing.T) {
	for _, c := range []struct {
		file, want string
	}{
		{"CLAUDE.md", Open}, {"srv/CLAUDE.local.md", Open}, {"srv/app/CLAUDE.md", Closed}, {"srv/other/CLAUDE.md", Closed},
	} {
		cfg := Config{Root: fsRoot(t, map[string]string{"srv/app/": "", c.file: "Read /srv/grader first.\n"}), Workdir: "/srv/app"}
		if f := checkoutWalk(cfg); f.Status != c.want {
			t.Errorf("%s: %+v, want %s", c.file, f, c.want)
		}
	}
}
