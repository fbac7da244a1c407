package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestResumeRefusesConflictingFlags: `tasks run --resume RUN` continues
// the run as it was requested. A flag of the run's spec given with a
// value other than the run's (here --model, --repeats, --harnesses,
// --tasks-root) is refused before anything runs, each listed with both
// values; one given with the run's own value is not listed (it was
// silently ignored before, and the resume went on with the stored
// spec).
func TestResumeRefusesConflictingFlags(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	b, e := bustest.Bus(t)
	root, _ := filepath.Abs("testdata/true-root")
	out := t.TempDir()
	id := events.NewID()
	rec := bus.RunRecord{ID: id, Status: bus.StatusInterrupted, Spec: events.RunSpec{TasksRoot: root, All: true,
		Harnesses: []string{"oracle"}, Models: []string{"default"}, Repeats: 1, OutputDir: filepath.Join(out, id), AgentGraceSec: 10}}
	rec.Renew(time.Now().Add(-time.Hour), time.Minute)
	if err := b.PutRun(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	_, errOut, code := proctor(t, "tasks", "run", "--resume", id, "--nats", e.ClientURL(), "--output-dir", out, "--all",
		"--tasks-root", other, "--model", "m1,m2", "--repeats", "3", "--harnesses", "oracle,command:true", "--concurrency", "2")
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d:\n%s", code, ExitUsage, errOut)
	}
	for _, want := range []string{"--model m1,m2 (the run has default)", "--repeats 3 (the run has 1)",
		"--harnesses oracle,command:true (the run has oracle)", "--tasks-root " + other + " (the run has " + root + ")"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the refusal does not list %q:\n%s", want, errOut)
		}
	}
	for _, same := range []string{"--output-dir", "--all", "--concurrency"} {
		if strings.Contains(errOut, same) {
			t.Errorf("the refusal lists %s, given with the run's own value or not part of it:\n%s", same, errOut)
		}
	}
	if got, _ := b.GetRun(context.Background(), id); got.Epoch != 0 || got.Status != bus.StatusInterrupted {
		t.Errorf("the refused resume changed the run: %+v", got)
	}
}
