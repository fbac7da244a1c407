package cellfs

import (
	"os"
	"strings"
	"testing"
)

// TestCaptureRedacts: a proxy password written in two pieces (the writer
// split it across writes), on a line without a final newline, and one in
// a scheme URL never reach the log file, the tail file or the row tail;
// run.log lines are redacted too.
func TestCaptureRedacts(t *testing.T) {
	d := Dir(t.TempDir())
	c, err := d.OpenCapture("solve.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"start\nproxy u:hunt", "er2@proxy.test:3128 ok\n", "url http://u:hunter2@proxy.test:80/x\n", "last u:hunter2@p.test:8080"} {
		if _, err := c.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(d, "stdout.tail.txt"); err != nil {
		t.Fatal(err)
	}
	d.Logf("proxy %s failed", "u:hunter2@proxy.test:3128")
	for _, f := range []string{"solve.log", "stdout.tail.txt", "run.log"} {
		b, err := os.ReadFile(d.Path(f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "hunter2") || !strings.Contains(string(b), "REDACTED@") {
			t.Errorf("%s: %q", f, b)
		}
	}
	want := "start\nproxy REDACTED@proxy.test:3128 ok\nurl http://REDACTED@proxy.test:80/x\nlast REDACTED@p.test:8080"
	if got := c.RowTail(); got != want {
		t.Errorf("row tail %q, want %q", got, want)
	}
}

// TestCaptureLongLine: a line longer than the hold-back bound without a
// newline is passed on (at its last blank), so the file and the tail keep
// up with a process that never ends a line.
func TestCaptureLongLine(t *testing.T) {
	d := Dir(t.TempDir())
	c, err := d.OpenCapture("solve.log")
	if err != nil {
		t.Fatal(err)
	}
	chunk := strings.Repeat("x", 1000) + " "
	for i := 0; i < 100; i++ {
		c.Write([]byte(chunk))
	}
	if got := c.Tail.Total(); got < 64<<10 {
		t.Errorf("tail holds %d bytes before Close, want the line passed on past %d", got, maxPending)
	}
	c.Close(d, "")
	if b, _ := os.ReadFile(d.Path("solve.log")); len(b) != 100*len(chunk) {
		t.Errorf("solve.log holds %d bytes, want %d", len(b), 100*len(chunk))
	}
}
