package testutil

import (
	"net"
	"testing"
)

// FreePorts returns n distinct loopback TCP ports that were free when it
// looked (held open together, then closed), for servers a test starts on
// fixed ports (a nats-server cluster's client and route ports).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}
