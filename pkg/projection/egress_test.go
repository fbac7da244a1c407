package projection

import (
	"encoding/json"
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

// TestEgressHostSets: metrics.egress names the allowed, denied and error
// targets and the distinct denied (target, reason) pairs with their counts,
// sorted; a connection allowed and then failed is in both sets.
func TestEgressHostSets(t *testing.T) {
	p := NewProjector("r1")
	for _, d := range []events.EgressDecisionData{
		{Host: "pypi.org", Port: 443, Method: "CONNECT", Decision: "allowed", Conn: 1},
		{Host: "evil.test", Port: 443, Method: "CONNECT", Decision: "denied", Reason: "not on the allowlist", Conn: 2},
		{Host: "evil.test", Port: 443, Method: "CONNECT", Decision: "denied", Reason: "not on the allowlist", Conn: 3},
		{Host: "evil.test", Port: 80, Method: "GET", Decision: "denied", Reason: "duplicate Host header", Conn: 4},
		{Host: "fd00::1", Port: 443, Method: "CONNECT", Decision: "denied", Reason: "IP literal not on the allowlist", Conn: 5},
		{Host: "gone.test", Port: 443, Method: "CONNECT", Decision: "allowed", Conn: 6},
		{Host: "gone.test", Port: 443, Method: "CONNECT", Decision: "error", Conn: 6, Closed: true},
	} {
		p.Apply(events.Must(events.EgressDecision, "r1", "c/h/m/1", 1, "proxylogger", d))
	}
	e := p.cells["c/h/m/1"].egressCounts()
	want := `{"allowed":2,"denied":4,"errors":0,"allowed_hosts":["gone.test:443","pypi.org:443"],"denied_hosts":["[fd00::1]:443","evil.test:443","evil.test:80"],` +
		`"error_hosts":["gone.test:443"],"denied_entries":[{"target":"[fd00::1]:443","reason":"IP literal not on the allowlist","count":1},` +
		`{"target":"evil.test:443","reason":"not on the allowlist","count":2},{"target":"evil.test:80","reason":"duplicate Host header","count":1}]}`
	if got, _ := json.Marshal(e); string(got) != want {
		t.Errorf("metrics.egress =\n%s\nwant\n%s", got, want)
	}
}

// TestEgressZeroBehindProxy: a cell whose sandbox had a proxy (its
// SandboxStarted state names one) has egress counts even with no
// decision; a cell without one has none.
func TestEgressZeroBehindProxy(t *testing.T) {
	p := NewProjector("r1")
	p.Apply(events.Must(events.SandboxStarted, "r1", "c/h/m/1", 1, "launcher", events.SandboxStartedData{Driver: "docker", ID: "x", State: map[string]string{"proxy": "10.213.0.62:3128"}}))
	p.Apply(events.Must(events.SandboxStarted, "r1", "c/h/m/2", 1, "launcher", events.SandboxStartedData{Driver: "docker", ID: "y", State: map[string]string{}}))
	got, _ := json.Marshal(p.cells["c/h/m/1"].egressCounts())
	if string(got) != `{"allowed":0,"denied":0,"errors":0,"allowed_hosts":[],"denied_hosts":[],"error_hosts":[],"denied_entries":[]}` {
		t.Errorf("behind a proxy: %s", got)
	}
	if e := p.cells["c/h/m/2"].egressCounts(); e != nil {
		t.Errorf("without a proxy: %+v", e)
	}
}
