package cli

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:80": true, "[::1]:8080": true, "localhost:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "192.168.1.4:8080": false, "nonsense": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// startViewCmd runs the proctor binary's `view` with args on a store of
// its own and returns the URL it prints, its stderr so far and the
// process.
func startViewCmd(t *testing.T, bin string, args ...string) (string, *testutil.SyncBuffer, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"view"}, args...)...)
	cmd.Env = append(os.Environ(), "PROCTOR_HOME="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testutil.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "proctor" || !strings.HasPrefix(f[2], "http://") {
			t.Fatalf("first line %q; stderr: %s", line, stderr.String())
		}
		return f[2], stderr, cmd
	case <-time.After(60 * time.Second):
		t.Fatalf("proctor view printed no URL; stderr: %s", stderr.String())
	}
	return "", nil, nil
}

// TestViewCommand runs `proctor view` from the binary: on all interfaces
// without a token it warns on stderr and serves; with --token it does not
// warn and refuses requests without the token; SIGTERM stops it cleanly.
func TestViewCommand(t *testing.T) {
	bin := buildProctor(t)
	port := freePort(t)
	u, stderr, cmd := startViewCmd(t, bin, "--addr", "0.0.0.0:"+port)
	// stderr is copied from a pipe by its own goroutine: poll it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "no authentication") && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "warning: proctor view listens on") || !strings.Contains(stderr.String(), "no authentication") {
		t.Errorf("no warning for a non-loopback address: %q", stderr.String())
	}
	local := strings.Replace(u, "0.0.0.0", "127.0.0.1", 1) + ".json"
	resp, err := http.Get(local)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"runs":[]`) {
		t.Errorf("GET %s: %d %s", local, resp.StatusCode, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("view after SIGTERM: %v; stderr: %s", err, stderr.String())
	}

	port = freePort(t)
	u, stderr, _ = startViewCmd(t, bin, "--addr", "0.0.0.0:"+port, "--token", "tok")
	if !strings.HasSuffix(u, "/runs?token=tok") {
		t.Errorf("printed URL %s", u)
	}
	resp, err = http.Get("http://127.0.0.1:" + port + "/runs.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	// Checked last, when the process has long written what it writes
	// before serving.
	if strings.Contains(stderr.String(), "warning") {
		t.Errorf("warned although a token is required: %q", stderr.String())
	}
}
