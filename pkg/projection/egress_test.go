package projection

import (
	"testing"

	"github.com/proctor-eval/proctor/pkg/events"
)

// TestEgressCloseRecordsNotCounted: the proxy-logger's close record of an
// allowed connection (closed: true) does not count the decision again.
func TestEgressCloseRecordsNotCounted(t *testing.T) {
	p := NewProjector("r1")
	for _, d := range []events.EgressDecisionData{
		{Host: "pypi.org", Port: 443, Method: "CONNECT", Decision: "allowed", Conn: 1},
		{Host: "pypi.org", Port: 443, Method: "CONNECT", Decision: "allowed", Conn: 1, Closed: true, BytesDown: 10},
		{Host: "evil.test", Port: 443, Method: "CONNECT", Decision: "denied", Conn: 2},
		{Host: "gone.test", Port: 443, Method: "CONNECT", Decision: "allowed", Conn: 3},
		{Host: "gone.test", Port: 443, Method: "CONNECT", Decision: "error", Conn: 3, Closed: true},
	} {
		p.Apply(events.Must(events.EgressDecision, "r1", "c/h/m/1", 1, "proxylogger", d))
	}
	e := p.cells["c/h/m/1"].egress
	if e == nil || e.Allowed != 2 || e.Denied != 1 || e.Errors != 0 {
		t.Fatalf("egress counts = %+v, want 2 allowed, 1 denied, 0 errors", e)
	}
}
