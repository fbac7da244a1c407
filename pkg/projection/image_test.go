package projection

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestProjectFailedBuildAndUnusedMapRules: a cell whose build failed keeps
// the build's time (build_sec, and an elapsed_sec that counts it) and its
// cause; the image-map rules no image of the run used are listed in the
// artifact, failed builds counting as uses.
func TestProjectFailedBuildAndUnusedMapRules(t *testing.T) {
	run := events.NewID()
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var log []events.Envelope
	add := func(at time.Duration, typ events.Type, cell string, data any) {
		e := events.Must(typ, run, cell, 1, "test", data)
		e.At = t0.Add(at)
		log = append(log, e)
	}
	spec := events.RunSpec{Harnesses: []string{"oracle"}, Models: []string{"m"}, Repeats: 1,
		ImageMap: map[string]string{"python:*": "proctor/python:*", "debian:bookworm-slim": "stand-in:1", "ghcr.io/": "mirror/ghcr/", "ubuntu:22.04": "debian:bookworm-slim"}}
	add(0, events.RunRequested, "", events.RunRequestedData{Spec: spec})
	add(0, events.RunPlanned, "", events.RunPlannedData{Cells: 2, Tasks: []string{"broken", "fine"}})
	for _, task := range []string{"broken", "fine"} {
		add(0, events.CellPlanned, task+"/oracle/m/1", events.CellPlannedData{Task: task, Harness: "oracle", Model: "m", Repeat: 1, TaskRevision: "rev-" + task})
	}
	cause := "sandbox: build of proctor-task/broken:0123456789ab failed: The command '/bin/sh -c apt-get install -y foo' returned a non-zero code: 100\nE: Unable to locate package foo"
	add(12500*time.Millisecond, events.ImageBuilt, "broken/oracle/m/1", events.ImageBuiltData{
		Image: "proctor-task/broken:0123456789ab", BuildSec: 12.5, Error: cause, ImageMapRules: []string{"python:*"},
		Rewrites: []string{"python:3.11-slim -> proctor/python:3.11-slim"}})
	add(12600*time.Millisecond, events.CellErrored, "broken/oracle/m/1", events.CellErroredData{ErrorClass: "build", Error: cause})
	add(2*time.Second, events.ImageBuilt, "fine/oracle/m/1", events.ImageBuiltData{Image: "proctor-task/fine:ab", Cached: true, BuildSec: 0.5, ImageMapRules: []string{"debian:bookworm-slim"}})
	add(3*time.Second, events.Finished, "fine/oracle/m/1", events.FinishedData{Reason: "exit 0", DurationSec: 1})
	add(4*time.Second, events.Verdict, "fine/oracle/m/1", events.VerdictData{Reward: ptr(1.0), DurationSec: 1})

	a := fold(run, log).Artifact("test")
	if _, err := artifact.Marshal(a); err != nil { // validated against the schema
		t.Fatal(err)
	}
	rows := map[string]artifact.Result{}
	for _, r := range a.Results {
		rows[r.Task] = r
	}
	b := rows["broken"]
	if b.Outcome != artifact.OutcomeErrored || b.ErrorClass != "build" || !strings.HasSuffix(b.Error, "\nE: Unable to locate package foo") {
		t.Errorf("broken: %+v", b)
	}
	if b.Metrics.BuildSec == nil || *b.Metrics.BuildSec != 12.5 || b.ElapsedSec != 12.6 {
		t.Errorf("broken: build_sec %v, elapsed_sec %v; want 12.5 and 12.6", b.Metrics.BuildSec, b.ElapsedSec)
	}
	if f := rows["fine"]; f.Outcome != artifact.OutcomePassed || f.ElapsedSec != 2.5 {
		t.Errorf("fine: %+v", f)
	}
	if want := []string{"ghcr.io/", "ubuntu:22.04"}; !reflect.DeepEqual(a.Run.ImageMapUnused, want) {
		t.Errorf("image_map_unused %q, want %q", a.Run.ImageMapUnused, want)
	}

	// Without an image map there is nothing to list.
	spec.ImageMap = nil
	log[0] = events.Must(events.RunRequested, run, "", 0, "test", events.RunRequestedData{Spec: spec})
	if got := fold(run, log).Artifact("test").Run.ImageMapUnused; got != nil {
		t.Errorf("no map: %q", got)
	}
}
