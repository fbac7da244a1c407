// Package cellfs is the on-disk layout of a cell's output directory, shared
// by the services that write into it:
//
//	<output_dir>/<task>/<harness>/<model>/<repeat>/
//	  run.log              one line per phase, written by proctor (textsafe)
//	  solve.log            the solve's stdout and stderr, interleaved (capped)
//	  verifier.log         the verifier's stdout and stderr (capped)
//	  stdout.tail.txt      the last 64 KiB of solve.log as valid UTF-8
//	  reward.txt           the reward, when the verifier gave one
//	  verifier/            /logs/verifier copied out of the sandbox
//	  logs/agent/, logs/artifacts/  /logs/agent and /logs/artifacts copied out
//
// Every log and tail written through this package (run.log, the captures
// and their tails) has the credentials of proxy addresses redacted
// (egress.RedactCredentials: "http://user:pw@proxy:3128" and the
// scheme-less "user:pw@proxy:3128"), whatever process printed them.
package cellfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// MaxLogBytes caps solve.log and verifier.log: 64 MiB each. Output past the
// cap is counted, not stored; the tails still see it.
const MaxLogBytes = 64 << 20

// RowTailBytes bounds the stdout tail carried in events and artifact rows:
// 4 KiB, cut at a rune boundary.
const RowTailBytes = 4 << 10

// Dir is a cell's output directory.
type Dir string

// Ensure creates the directory.
func (d Dir) Ensure() error {
	var err error
	for range 3 {
		// A parent removed meanwhile (a worker removing the empty
		// directories of a stored cell) is made again.
		if err = os.MkdirAll(string(d), 0o755); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

// Path joins elements under the directory.
func (d Dir) Path(elem ...string) string {
	return filepath.Join(append([]string{string(d)}, elem...)...)
}

// Logf appends a timestamped line to run.log, credentials redacted;
// errors are ignored (the event log is the record, run.log a convenience).
// The line is shown through textsafe.Line: what an agent wrote into it (a
// reason, a tool name) can neither act on a terminal that shows the file
// nor start a line of its own.
func (d Dir) Logf(format string, args ...any) {
	f, err := os.OpenFile(d.Path("run.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), textsafe.Line(egress.RedactCredentials(fmt.Sprintf(format, args...))))
}

// WriteReward writes reward.txt.
func (d Dir) WriteReward(r float64) error {
	return os.WriteFile(d.Path("reward.txt"), []byte(strconv.FormatFloat(r, 'f', -1, 64)+"\n"), 0o644)
}

// Capture is the output sink of one phase: a capped log file plus a tail,
// both with credentials redacted. It is safe for concurrent writes
// (stdout and stderr). Output is passed on line by line (an unfinished
// line is held back, up to maxPending bytes, so a credential split across
// two writes is still found); Close passes on the rest, so read Tail
// after Close.
type Capture struct {
	mu      sync.Mutex
	f       *os.File
	written int64
	pending []byte
	Tail    *sandbox.Tail
}

// maxPending bounds the unfinished line a Capture holds back: past it, the
// line is passed on up to its last blank.
const maxPending = 64 << 10

// OpenCapture creates (truncates) the log file name in the directory.
func (d Dir) OpenCapture(name string) (*Capture, error) {
	if err := d.Ensure(); err != nil {
		return nil, err
	}
	f, err := os.Create(d.Path(name))
	if err != nil {
		return nil, fmt.Errorf("cellfs: %w", err)
	}
	return &Capture{f: f, Tail: sandbox.NewTail(0)}, nil
}

// Write stores p, redacted, in the file up to MaxLogBytes and always in
// the tail; it never fails, so a full disk does not stop a solve.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, p...)
	cut := bytes.LastIndexByte(c.pending, '\n') + 1
	if cut == 0 && len(c.pending) > maxPending {
		if cut = bytes.LastIndexAny(c.pending, " \t") + 1; cut == 0 {
			cut = len(c.pending)
		}
	}
	if cut > 0 {
		c.pass(c.pending[:cut])
		c.pending = append(c.pending[:0], c.pending[cut:]...)
	}
	return len(p), nil
}

// pass writes b, redacted, to the tail and, up to the cap, the file.
// c.mu is held.
func (c *Capture) pass(b []byte) {
	b = egress.RedactCredentialsBytes(b)
	c.Tail.Write(b)
	if room := MaxLogBytes - c.written; room > 0 {
		q := b
		if int64(len(q)) > room {
			q = q[:room]
		}
		n, _ := c.f.Write(q)
		c.written += int64(n)
	}
}

var _ io.Writer = (*Capture)(nil)

// Close passes on what is held back, closes the file and writes the tail
// file tailName ("" = none).
func (c *Capture) Close(d Dir, tailName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > 0 {
		c.pass(c.pending)
		c.pending = nil
	}
	if c.Tail.Total() > MaxLogBytes {
		fmt.Fprintf(c.f, "\n[proctor: output capped at %d bytes of %d]\n", MaxLogBytes, c.Tail.Total())
	}
	err := c.f.Close()
	if tailName != "" {
		if werr := os.WriteFile(d.Path(tailName), []byte(c.Tail.String()), 0o644); err == nil {
			err = werr
		}
	}
	return err
}

// Capped reports whether more was written than the file holds (it was cut
// at MaxLogBytes).
func (c *Capture) Capped() bool { return c.Tail.Total() > MaxLogBytes }

// RowTail is the last RowTailBytes of the captured output as valid UTF-8,
// cut at a rune boundary.
func (c *Capture) RowTail() string { return Suffix(c.Tail.String(), RowTailBytes) }

// Suffix returns the last n bytes of s or fewer, never starting inside a
// rune.
func Suffix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
