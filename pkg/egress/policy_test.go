package egress

import (
	"strings"
	"testing"
)

func TestParseEntry(t *testing.T) {
	good := []struct {
		in   string
		want string
	}{
		{"pypi.org", "pypi.org:443"},
		{"PyPI.org.", "pypi.org:443"},
		{"files.pythonhosted.org:8443", "files.pythonhosted.org:8443"},
		{" example.com:80 ", "example.com:80"},
		{"10.0.0.5", "10.0.0.5:443"},
		{"10.0.0.5:4000", "10.0.0.5:4000"},
		{"fd00::1", "[fd00::1]:443"},
		{"[FD00::1]:8443", "[fd00::1]:8443"},
		{"[fd00::1]", "[fd00::1]:443"},
		{"private:litellm.internal:4000", "private:litellm.internal:4000"},
		{"PRIVATE:gw", "private:gw:443"},
		{"private.:8080", "private:8080"},
		{"my_service", "my_service:443"},
	}
	for _, g := range good {
		e, err := ParseEntry(g.in)
		if err != nil {
			t.Errorf("ParseEntry(%q): %v", g.in, err)
			continue
		}
		if e.String() != g.want {
			t.Errorf("ParseEntry(%q) = %s, want %s", g.in, e, g.want)
		}
	}
	bad := []struct{ in, why string }{
		{"", "empty"},
		{"private:", "empty"},
		{"*.example.com", "wildcard"},
		{".example.com", "leading dot"},
		{"example.com..", "trailing dots"},
		{"a..b", "empty label"},
		{"example.com:0", "1..65535"},
		{"example.com:65536", "1..65535"},
		{"example.com:https", "not a number"},
		{"example.com:+443", "not a number"},
		{"-bad.com", "'-'"},
		{"exa mple.com", "not allowed"},
		{"1.2.3", "all-numeric"},
		{"2130706433", "all-numeric"},
		{"fe80::1%eth0", "host:port"},
		{"[fe80::1%eth0]:443", "zone"},
		{"http://example.com", "not a URL"}, {"u:pw@example.com", "not a URL"},
		{"private:8080", "all-numeric"},
	}
	for _, b := range bad {
		_, err := ParseEntry(b.in)
		if err == nil {
			t.Errorf("ParseEntry(%q) = nil error, want one about %s", b.in, b.why)
			continue
		}
		name := b.in
		if i := strings.LastIndex(name, "@"); i >= 0 {
			name = Redacted + name[i:]
		}
		if !strings.Contains(err.Error(), b.why) || !strings.Contains(err.Error(), `"`+name+`"`) || strings.Contains(err.Error(), "pw@") {
			t.Errorf("ParseEntry(%q) error %q: want it to name the entry and say %q", b.in, err, b.why)
		}
	}
}

func TestPolicyAllowed(t *testing.T) {
	p, err := ParsePolicy([]string{"pypi.org", "example.com:8080", "10.0.0.5:4000", "fd00::1", "private:gw.test:80", "gw.test:80"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		port int
		want bool
	}{
		{"pypi.org", 443, true},
		{"PYPI.ORG.", 443, true},
		{"pypi.org", 80, false},
		{"www.pypi.org", 443, false},
		{"example.com", 8080, true},
		{"example.com", 443, false},
		{"10.0.0.5", 4000, true},
		{"::ffff:10.0.0.5", 4000, true},
		{"10.0.0.6", 4000, false},
		{"[fd00::1]", 443, true},
		{"fd00:0::1", 443, true},
		{"gw.test", 80, true},
		{"*.org", 443, false},
		{"", 443, false},
	}
	for _, c := range cases {
		if got := p.Allowed(c.host, c.port); got != c.want {
			t.Errorf("Allowed(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	if e, _ := p.Lookup("gw.test", 80); !e.Private {
		t.Errorf("repeated entries did not merge the private mark: %+v", e)
	}
	var none *Policy
	if none.Allowed("pypi.org", 443) {
		t.Error("a nil Policy allowed a host")
	}
	if _, err := ParsePolicy([]string{"ok.com", "bad..com"}); err == nil || !strings.Contains(err.Error(), `"bad..com"`) {
		t.Errorf("ParsePolicy error %v does not name the bad entry", err)
	}
	if got := len(p.Entries()); got != 5 {
		t.Errorf("Entries() has %d entries, want 5", got)
	}
}
