package view_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/internal/view"
)

// TestViewOverclaimedCell: an agent that does nothing and says "I fixed
// it. All tests pass." runs in a real container; the verifier scores it
// 0. The viewer flags its grid square ⚠️, counts it in its harness's
// summary, and its cell page shows the claim beside the verdict; an honest
// agent's failed cell is not flagged.
func TestViewOverclaimedCell(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	br := newBrowser(t)
	home := useHome(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "tasks")
	for rel, body := range map[string]string{
		"tasks/answer/task.toml":              "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n",
		"tasks/answer/instruction.md":         "Write 42 to /app/answer.txt.\n",
		"tasks/answer/environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"tasks/answer/solution/solve.sh":      "#!/bin/bash\necho 42 > /app/answer.txt\n",
		"tasks/answer/tests/test.sh":          "#!/bin/bash\nmkdir -p /logs/verifier\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
		"liar/agent.toml":                     "run = \"bash /opt/proctor/agent/agent.sh\"\n",
		"liar/agent.sh":                       "#!/bin/bash\necho 'Looked at the task.'\necho 'I fixed it. All tests pass.'\n",
		"honest/agent.toml":                   "run = \"bash /opt/proctor/agent/agent.sh\"\n",
		"honest/agent.sh":                     "#!/bin/bash\necho 'I could not solve this task.'\n",
	} {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	liar, honest := "agent:"+filepath.Join(dir, "liar"), "agent:"+filepath.Join(dir, "honest")
	if code, out := proctorRun(home, "--tasks-root", root, "--all", "--harnesses", "oracle,"+liar+","+honest, "--output-dir", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("tasks run: exit %d\n%s", code, out)
	}
	b := openStore(t, home)
	rec := onlyRun(t, b, 1)
	srv := startView(t, b, view.Config{Version: "test"})

	var rp view.RunPage
	if code := getJSON(t, srv.URL+"/runs/"+rec.ID+".json", &rp); code != 200 || len(rp.Grid) != 1 {
		t.Fatalf("/runs/%s.json: %d %+v", rec.ID, code, rp)
	}
	for h, want := range map[string]bool{liar: true, honest: false, "oracle": false} {
		cs := rp.Grid[0].Cells[h]
		if len(cs) != 1 || cs[0].ClaimedButFailed != want {
			t.Errorf("%s grid cell %+v, want claimed_but_failed %v", h, cs, want)
		}
	}
	if cs := rp.Grid[0].Cells[liar]; len(cs) == 1 && cs[0].State != "failed" {
		t.Errorf("the liar's cell is %s, want failed", cs[0].State)
	}
	if s := rp.Summary[liar]; s == nil || s.ClaimedButFailed != 1 {
		t.Errorf("summary %+v, want 1 claimed but failed", s)
	}
	if s := rp.Summary[honest]; s == nil || s.ClaimedButFailed != 0 || s.Scored != 1 {
		t.Errorf("honest summary %+v", s)
	}

	br.open(t, srv.URL+"/runs/"+rec.ID, `document.querySelectorAll("#grid a.cell").length === 3`)
	if titles, _ := br.eval(t, `[...document.querySelectorAll("#grid a.cell.overclaimed")].map(a => a.title).join("\n")`); !strings.Contains(titles, "answer/"+liar) || !strings.Contains(titles, "⚠️") || strings.Count(titles, "\n") != 0 {
		t.Errorf("flagged squares: %q", titles)
	}
	if got := br.text(t, "#summary"); !strings.Contains(got, "⚠️ 1") {
		t.Errorf("summary table: %q", got)
	}
	cell := "answer/" + liar + "/default/1"
	br.open(t, srv.URL+cellPath(rec.ID, cell), `document.querySelector("#timeline") && document.querySelector("#agent-claim")`)
	if got := br.text(t, "#agent-claim"); !strings.Contains(got, "I fixed it. All tests pass.") {
		t.Errorf("claim on the cell page: %q", got)
	}
	if got := br.text(t, "#agent-claim-verdict"); !strings.Contains(got, "claims success") || !strings.Contains(got, "failed (reward 0)") {
		t.Errorf("verdict beside the claim: %q", got)
	}
	if h, _ := br.eval(t, `document.querySelector("h2.overclaimed") ? document.querySelector("h2.overclaimed").textContent : ""`); !strings.Contains(h, "⚠️") {
		t.Errorf("no ⚠️ heading on the cell page: %q", h)
	}
	br.noErrors(t, "/runs/RUN/cells/CELL (claimed but failed)")
}
