package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestRunsListShowsAPausedRun: a paused run is listed "running (paused)",
// as `runs show` prints it, in the table (its arms cut so the line stays
// within 100 columns) and in --wide; a running run is listed running, and
// a run that ended while paused by its status alone. --json keeps the
// index's status, the pause in control.paused.
func TestRunsListShowsAPausedRun(t *testing.T) {
	t.Parallel()
	now := time.Now()
	arms := []string{"oracle", "agent:examples/agents/scripted", "docker-claude", "docker-codex"}
	paused := bus.RunRecord{ID: "01PAUSEDRUN0000000000000000", Status: bus.StatusRunning, StartedAt: now.UTC().Format(time.RFC3339),
		Spec: events.RunSpec{Harnesses: arms}, Control: bus.ControlState{Paused: true, PausedBy: "ops", PausedWhy: "hold on"}}
	live := bus.RunRecord{ID: "01LIVERUN000000000000000000", Status: bus.StatusRunning, StartedAt: now.UTC().Format(time.RFC3339),
		Spec: events.RunSpec{Harnesses: arms}}
	ended := bus.RunRecord{ID: "01ENDEDRUN00000000000000000", Status: bus.StatusCancelled, StartedAt: now.UTC().Format(time.RFC3339),
		FinishedAt: now.UTC().Format(time.RFC3339), Spec: events.RunSpec{Harnesses: arms}, Control: bus.ControlState{Paused: true, Cancelled: true}}
	url := runsOnABus(t, paused, live, ended)
	lineOf := func(out, prefix string) string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line of %s in:\n%s", prefix, out)
		return ""
	}

	list := mustProctor(t, "runs", "list", "--nats", url)
	if l := lineOf(list, paused.ID[:10]); !strings.HasPrefix(l, paused.ID[:10]+"  running (paused)  ") {
		t.Errorf("the paused run is not listed running (paused): %q", l)
	}
	if l := lineOf(list, live.ID[:10]); !strings.HasPrefix(l, live.ID[:10]+"  running   ") || strings.Contains(l, "paused") {
		t.Errorf("the running run is not listed running: %q", l)
	}
	if l := lineOf(list, ended.ID[:10]); !strings.HasPrefix(l, ended.ID[:10]+"  cancelled ") || strings.Contains(l, "paused") {
		t.Errorf("the run that ended while paused is not listed by its status alone: %q", l)
	}
	if !strings.Contains(list, "  oracle,agent:scripte…  ") {
		t.Errorf("the arms are not cut to what the wider status leaves:\n%s", list)
	}
	for _, l := range strings.Split(list, "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("runs list line of %d columns: %q", n, l)
		}
	}
	wide := mustProctor(t, "runs", "list", "--wide", "--nats", url)
	if l := lineOf(wide, paused.ID); !strings.HasPrefix(l, paused.ID+"  running (paused)  ") {
		t.Errorf("runs list --wide of the paused run: %q", l)
	}

	var views []runView
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "list", "--json", "--nats", url)), &views); err != nil {
		t.Fatal(err)
	}
	got := map[string]runView{}
	for _, v := range views {
		got[v.ID] = v
	}
	if v := got[paused.ID]; v.Status != bus.StatusRunning || !v.Control.Paused || v.Control.PausedBy != "ops" {
		t.Errorf("runs list --json of the paused run: status %q control %+v, want running and paused by ops", v.Status, v.Control)
	}
	if v := got[live.ID]; v.Status != bus.StatusRunning || v.Control.Paused {
		t.Errorf("runs list --json of the running run: status %q control %+v", v.Status, v.Control)
	}
	if show := mustProctor(t, "runs", "show", paused.ID, "--nats", url); !strings.Contains(show, "status     running (paused)\n") {
		t.Errorf("runs show of the paused run:\n%s", show)
	}
}
