package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// startViewIn runs the proctor binary's `view` on the store under home
// and returns its base URL.
func startViewIn(t *testing.T, bin, home string) (string, *testutil.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, "view", "--addr", "127.0.0.1:"+freePort(t))
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+home)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[2], "http://") {
			t.Fatalf("first line %q; stderr: %s", line, stderr.String())
		}
		return strings.TrimSuffix(f[2], "/runs"), stderr
	case <-time.After(60 * time.Second):
		t.Fatalf("proctor view printed no URL; stderr: %s", stderr.String())
	}
	return "", nil
}

// viewPage is the part of a viewer page the test reads: a run index
// page's runs, or a run page's record and finished flag.
type viewPage struct {
	Runs []struct {
		ID string `json:"id"`
	} `json:"runs"`
	Record struct {
		Status string `json:"status"`
	} `json:"record"`
	Finished bool   `json:"finished"`
	Pending  string `json:"pending"`
}

// pollView GETs url until ok accepts the page, failing at once on an
// answer other than 200 or 503 with a pending body (the viewer changing
// hands), and after d.
func pollView(t *testing.T, url string, d time.Duration, ok func(viewPage) bool) viewPage {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p viewPage
		_ = json.Unmarshal(body, &p)
		switch {
		case resp.StatusCode == http.StatusOK && ok(p):
			return p
		case resp.StatusCode == http.StatusOK:
		case resp.StatusCode == http.StatusServiceUnavailable && p.Pending != "":
		default:
			t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: not there within %v: %s", url, d, body)
		}
		time.Sleep(50 * time.Millisecond) // polling the viewer, as its pages do
	}
}

// TestViewNeverHoldsTheStore: a viewer started while run A is live reads
// through A's server and keeps answering once A's process has exited (it
// answered every page with HTTP 500); then, serving the store itself, it
// hands the store over to a run B started after it (B failed with "store
// in use"), follows B, and serves on after B's end. Between owners its
// pages answer "pending", never an error.
func TestViewNeverHoldsTheStore(t *testing.T) {
	t.Parallel()       // its own store, processes and engine objects; the environment is never set
	testutil.Docker(t) // the in-process stack needs an engine
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/true-root")
	gate := filepath.Join(t.TempDir(), "gate")
	a := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", gated(gate), "--output-dir", out)
	idA := a.id(t)
	a.waitBlocked(t, out, idA, 1, time.Minute)

	u, viewErr := startViewIn(t, bin, home)
	pollView(t, u+"/runs/"+idA+".json", 30*time.Second, func(p viewPage) bool { return !p.Finished })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run A exit %d:\n%s", code, a.stderr.String())
	}
	// A's process is gone, and its server with it.
	pollView(t, u+"/runs/"+idA+".json", 30*time.Second, func(p viewPage) bool { return p.Finished && p.Record.Status == "finished" })
	pollView(t, u+"/runs.json", 30*time.Second, func(p viewPage) bool { return len(p.Runs) == 1 && p.Runs[0].ID == idA })

	b := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "command:true", "--output-dir", out)
	idB := b.id(t)
	if code := b.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("run B, started while the viewer served the store, exit %d:\n%s", code, b.stderr.String())
	}
	pollView(t, u+"/runs/"+idB+".json", 30*time.Second, func(p viewPage) bool { return p.Finished && p.Record.Status == "finished" })
	pollView(t, u+"/runs.json", 30*time.Second, func(p viewPage) bool { return len(p.Runs) == 2 })
	if s := viewErr.String(); strings.Contains(s, "error") || strings.Contains(s, "panic") {
		t.Errorf("the viewer's stderr: %s", s)
	}
}

// TestRunStartsWhileTheViewerServesTheStore: with a viewer started first
// on a store no run holds, `tasks run` takes the store over (it failed
// with "store in use"), and the viewer shows the run to its end.
func TestRunStartsWhileTheViewerServesTheStore(t *testing.T) {
	t.Parallel() // its own store, processes and engine objects; the environment is never set
	testutil.Docker(t)
	bin := buildProctor(t)
	home, out := t.TempDir(), t.TempDir()
	root, _ := filepath.Abs("testdata/true-root")
	u, _ := startViewIn(t, bin, home)
	pollView(t, u+"/runs.json", 30*time.Second, func(p viewPage) bool { return len(p.Runs) == 0 })
	r := startProctor(t, bin, home, "tasks", "run", "--tasks-root", root, "--all", "--harnesses", "command:true", "--output-dir", out)
	if code := r.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("tasks run beside a viewer: exit %d:\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "proctor view hands the store over to this run") {
		t.Errorf("the run does not say the viewer handed the store over:\n%s", r.stderr.String())
	}
	id := r.id(t)
	pollView(t, u+"/runs/"+id+".json", 30*time.Second, func(p viewPage) bool { return p.Finished && p.Record.Status == "finished" })
}
