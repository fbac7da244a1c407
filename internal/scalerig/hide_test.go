package scalerig

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHidingTheInputsFromAWorker: a process the rig starts in a mount
// namespace of its own with the inputs hidden (the probe every rig run
// makes before it starts a worker so) sees nothing of what the rig left
// in DIR/inputs and cannot write there, while the rig still sees it; the
// same role started in the rig's own namespace refuses to hide anything,
// so the rig's view, and the planner's, is never covered.
func TestHidingTheInputsFromAWorker(t *testing.T) {
	dir := t.TempDir()
	r := &rig{cfg: Config{Dir: dir, Self: []string{os.Args[0]}}, start: time.Now()}
	defer r.stopAll()
	r.inputs, r.logs = filepath.Join(dir, "inputs"), filepath.Join(dir, "logs")
	for _, d := range []string{r.inputs, r.inputs + ".planned", r.logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	planted := filepath.Join(r.inputs, "0000", "tasks", "s000", "task.toml")
	if err := os.MkdirAll(filepath.Dir(planted), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(planted, []byte("name = \"s000\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := r.probeHiding(); err != nil {
		if runtime.GOOS != "linux" || errors.Is(err, syscall.EPERM) {
			t.Skipf("no mount namespace of its own for a process here: %v", err)
		}
		t.Fatalf("probe: %v", err)
	}
	if _, err := os.Stat(planted); err != nil {
		t.Fatalf("the rig lost its view of the inputs after hiding them from a worker: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.inputs, "written")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file the hidden view refused is on the rig's: %v", err)
	}

	log := filepath.Join(r.logs, "same-ns.log")
	argv := append(append([]string(nil), r.cfg.Self...), "hide-check", strings.Join(r.hiddenDirs(), ","))
	p, err := r.ps.startIn("probe", "same-ns", argv, r.env("same-ns"), "", log, false)
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	out, _ := os.ReadFile(log)
	if p.err == nil || !strings.Contains(string(out), "shares its parent's mount namespace") {
		t.Errorf("hide-check in the rig's mount namespace: %v, %q; want it refused", p.err, out)
	}
	if _, err := os.Stat(planted); err != nil {
		t.Errorf("the rig lost its view of the inputs: %v", err)
	}
}
