package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

// TestWatchAndRunsShowDecodeErrors injects two events whose data does not
// decode (a Usage and a Verdict of the cell that had no verdict) into the
// golden log in a real JetStream stream: `watch` and `runs show` (text and
// --json) report them as the artifact counts them, by type, and the
// cell whose verdict did not decode is errored.
func TestWatchAndRunsShowDecodeErrors(t *testing.T) {
	t.Parallel()
	setenv(t, "PROCTOR_HOME", t.TempDir())
	b, e := bustest.Bus(t)
	ctx := context.Background()
	evs := readFixture(t)
	runID := evs[0].RunID
	bad := func(typ events.Type, data string) events.Envelope {
		ev := events.Must(typ, runID, "bad-reward/agent:demo/m1/1", 1, "launcher", nil)
		ev.At = time.Date(2025, 1, 15, 10, 0, 29, 0, time.UTC)
		ev.Data = json.RawMessage(data)
		return ev
	}
	last := len(evs) - 1
	log := append(append(append([]events.Envelope{}, evs[:last]...),
		bad(events.Usage, `{"prompt_tokens":"many"}`), bad(events.Verdict, `{"reward":"high"}`)), evs[last])
	if err := b.PublishAll(ctx, log...); err != nil {
		t.Fatal(err)
	}
	const want = "2 events did not decode (Usage 1, Verdict 1); the first: events: decode Usage data of "

	out := mustProctor(t, "watch", runID, "--nats", e.ClientURL())
	if !strings.Contains(out, "warning: "+want) {
		t.Errorf("watch did not report the decode errors:\n%s", out)
	}
	out = mustProctor(t, "runs", "show", runID, "--nats", e.ClientURL())
	if !strings.Contains(out, "warning    "+want) {
		t.Errorf("runs show did not report the decode errors:\n%s", out)
	}
	var v runView
	if err := json.Unmarshal([]byte(mustProctor(t, "runs", "show", runID, "--nats", e.ClientURL(), "--json", "--cells")), &v); err != nil {
		t.Fatal(err)
	}
	if s := v.CellStates["bad-reward/agent:demo/m1/1"]; s != "errored" {
		t.Errorf("the cell with the malformed verdict is %q, want errored", s)
	}
	if d := v.DecodeErrors; d == nil || d.Count != 2 || d.ByType["Usage"] != 1 || d.ByType["Verdict"] != 1 {
		t.Errorf("runs show --json decode_errors %+v", d)
	}
}
