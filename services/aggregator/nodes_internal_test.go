package aggregator

import (
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestNodeLostIDDerived: every aggregator derives the same event id for
// the error of one attempt (so the stream keeps one copy), a valid ULID
// at the Finished time, and another for another attempt or cell.
func TestNodeLostIDDerived(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := verifyWait{cell: "t/oracle/m/1", attempt: 1, node: "n1", finished: at, since: time.Now()}
	w := v
	w.since = time.Now().Add(time.Minute) // another aggregator saw it later
	id := nodeLostID("run", v)
	if nodeLostID("run", w) != id {
		t.Fatal("two aggregators derive different ids")
	}
	u, err := ulid.ParseStrict(id)
	if err != nil || !ulid.Time(u.Time()).Equal(at) {
		t.Errorf("id %s: %v, time %v, want a ULID at %v", id, err, ulid.Time(u.Time()), at)
	}
	v2 := v
	v2.attempt = 2
	v3 := v
	v3.cell = "t/oracle/m/2"
	if nodeLostID("run", v2) == id || nodeLostID("run", v3) == id || nodeLostID("run2", v) == id {
		t.Error("another attempt, cell or run has the same id")
	}
}
