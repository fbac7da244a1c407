package scalerig

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/services/launcher"
)

// TestStatCPU: utime + stime of a /proc/<pid>/stat line whose command
// name holds spaces and a parenthesis, in USER_HZ ticks.
func TestStatCPU(t *testing.T) {
	line := "4242 (proctor scale) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 25 0 0 20 0 12 0 100 1000000 2000\n"
	if got := statCPU([]byte(line)); got != 1750*time.Millisecond {
		t.Errorf("statCPU = %v, want 1.75s", got)
	}
	if got := statCPU([]byte("garbage")); got != 0 {
		t.Errorf("statCPU(garbage) = %v, want 0", got)
	}
}

// TestNormalizeKeepsWhatAPlanDecides: two artifacts of one plan that
// differ only in ids, times, durations, paths and attempts normalize
// equal; a different outcome does not.
func TestNormalizeKeepsWhatAPlanDecides(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.json", `{"run":{"id":"A","started_at":"t1"},"results":[{"cell_id":"c","attempt":1,"elapsed_sec":3.5,"output_dir":"/x/A/c","outcome":"passed","metrics":{"build_sec":0.1}}]}`)
	b := write("b.json", `{"run":{"id":"B","started_at":"t2"},"results":[{"cell_id":"c","attempt":2,"elapsed_sec":9,"output_dir":"/x/B/c","outcome":"passed","metrics":{"build_sec":0}}]}`)
	c := write("c.json", `{"run":{"id":"C","started_at":"t3"},"results":[{"cell_id":"c","attempt":1,"elapsed_sec":3.5,"output_dir":"/x/C/c","outcome":"failed","metrics":{"build_sec":0.1}}]}`)
	na, _ := normalize(a)
	nb, _ := normalize(b)
	nc, err := normalize(c)
	if err != nil {
		t.Fatal(err)
	}
	if na.text != nb.text {
		t.Errorf("same plan normalized differently: %s", firstDiff(na.text, nb.text))
	}
	if na.text == nc.text || firstDiff(nc.text, na.text) == "" {
		t.Error("a different outcome normalized equal")
	}
}

// TestClaimLines: the launcher's claim line of a first delivery reaches
// the claims file and is read back; a redelivery's does not, and other
// records go to the next handler.
func TestClaimLines(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "w001.claims"))
	if err != nil {
		t.Fatal(err)
	}
	var next slogBuffer
	log := slog.New(claimHandler{next: slog.NewTextHandler(&next, nil), mu: &sync.Mutex{}, w: f}).With("service", "launcher")
	log.Debug(launcher.ClaimedMsg, "run", "R", "cell", "c/1", "delivery", uint64(1), "queued", 25*time.Millisecond)
	log.Debug(launcher.ClaimedMsg, "run", "R", "cell", "c/1", "delivery", uint64(2), "queued", time.Minute)
	log.Info("other")
	log.Debug("debug other")
	f.Close()
	got, err := readClaims(dir, "w")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != 25*time.Millisecond {
		t.Errorf("claims %v, want [25ms]", got)
	}
	if n := next.lines(); n != 1 {
		t.Errorf("%d records passed on, want 1 (the info line)", n)
	}
	if !claimHandler.Enabled(claimHandler{}, context.Background(), slog.LevelDebug) {
		t.Error("the claim handler must see debug records")
	}
}

type slogBuffer struct{ b []byte }

func (s *slogBuffer) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }
func (s *slogBuffer) lines() (n int) {
	for _, c := range s.b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// TestLongestGap: the longest stretch of [from, to] with no time in it.
func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ts := []time.Time{at(1), at(3), at(10), at(11), at(30)}
	if g := longestGap(ts, at(0), at(12)); g != 7*time.Second {
		t.Errorf("gap %v, want 7s", g)
	}
	if g := longestGap(ts, at(11), at(20)); g != 9*time.Second {
		t.Errorf("gap to the end %v, want 9s", g)
	}
}
