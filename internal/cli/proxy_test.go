package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
)

// TestProxyCommand runs `proctor proxy` as the sidecar will: a denied host
// and a listed loopback upstream are both refused (the command has no way
// to allow loopback) and both decisions are lines of --egress-log.
func TestProxyCommand(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	logFile := filepath.Join(t.TempDir(), "egress.jsonl")
	var stdout, stderr testutil.SyncBuffer
	root := newRoot(&stdout, &stderr)
	root.SetArgs([]string{"proxy", "--listen", "127.0.0.1:0", "--allow", "allowed.test," + up.Addr().String(),
		"--egress-log", logFile, "--cell", "c9"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		if s, ok := strings.CutPrefix(strings.TrimSpace(stdout.String()), "listening on "); ok {
			addr = s
		} else if time.Now().After(deadline) {
			t.Fatalf("no listening line; stdout %q stderr %q", stdout.String(), stderr.String())
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, target := range []string{"denied.test:443", up.Addr().String()} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		c.Close()
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("CONNECT %s: %v %v, want 403", target, resp, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("proxy command: %v (stderr %q)", err, stderr.String())
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("egress log has %d lines, want 2:\n%s", len(lines), b)
	}
	for i, want := range []string{"not on the allowlist", "loopback"} {
		var r struct{ Cell, Decision, Reason string }
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.Cell != "c9" || r.Decision != "denied" || !strings.Contains(r.Reason, want) {
			t.Errorf("line %d = %s, want denied: %s", i+1, lines[i], want)
		}
	}

	// A bad entry is a usage error naming it.
	if code := Main([]string{"proxy", "--listen", "127.0.0.1:0", "--allow", "*.example.com"}, io.Discard, &stderr); code != ExitUsage ||
		!strings.Contains(stderr.String(), `"*.example.com"`) {
		t.Errorf("bad --allow: exit %d, stderr %q", code, stderr.String())
	}
}
