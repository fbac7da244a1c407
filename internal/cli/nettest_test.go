package cli

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// waitNATS polls until a server answers at url (30 s at most).
func waitNATS(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(url)
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server at %s never answered: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
