package proxylogger

import (
	"net/netip"
	"testing"
)

func TestForbiddenAddresses(t *testing.T) {
	name := Entry{Host: "gw.test", Port: 443}
	privName := Entry{Host: "gw.test", Port: 443, Private: true}
	lit := Entry{Host: "10.0.0.5", Port: 443, IP: netip.MustParseAddr("10.0.0.5")}
	cases := []struct {
		addr  string
		e     Entry
		loop  bool
		allow bool
	}{
		{"93.184.215.14", name, false, true},
		{"127.0.0.1", name, false, false},
		{"::1", name, false, false},
		{"::ffff:127.0.0.1", name, false, false},
		{"127.0.0.1", name, true, true},
		{"169.254.169.254", name, true, false},
		{"fe80::1", name, true, false},
		{"0.0.0.0", name, true, false},
		{"0.1.2.3", name, true, false},
		{"224.0.0.1", name, true, false},
		{"10.0.0.5", name, false, false},
		{"192.168.1.1", name, false, false},
		{"100.64.0.1", name, false, false},
		{"fd00::1", name, false, false},
		{"10.0.0.5", privName, false, true},
		{"fd00::1", privName, false, true},
		{"10.0.0.5", lit, false, true},
		{"10.0.0.6", lit, false, false},
	}
	for _, c := range cases {
		why := forbidden(netip.MustParseAddr(c.addr), c.e, c.loop)
		if (why == "") != c.allow {
			t.Errorf("forbidden(%s, %s, loopback=%v) = %q, want allowed=%v", c.addr, c.e, c.loop, why, c.allow)
		}
	}
}
