package harness

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"sync"
)

// Redactor replaces credential values in text with "[REDACTED:NAME]":
// each value as written and as it appears inside a JSON string (escaped),
// longest first, so a stored stream, log or tail never holds a credential.
// Values shorter than 4 bytes are not redacted (they would match
// everywhere). The zero value redacts nothing.
type Redactor struct {
	pairs []string // old, new, ... for strings.NewReplacer
	max   int      // longest old string
}

// NewRedactor returns a Redactor of the credential values in env (name ->
// value).
func NewRedactor(env map[string]string) *Redactor {
	type rep struct{ old, new string }
	var reps []rep
	seen := map[string]bool{}
	for name, v := range env {
		if len(v) < 4 {
			continue
		}
		j, _ := json.Marshal(v)
		esc := string(j[1 : len(j)-1])
		for _, form := range []string{v, esc} {
			if !seen[form] {
				seen[form] = true
				reps = append(reps, rep{form, "[REDACTED:" + name + "]"})
			}
		}
	}
	sort.Slice(reps, func(i, k int) bool {
		if len(reps[i].old) != len(reps[k].old) {
			return len(reps[i].old) > len(reps[k].old)
		}
		return reps[i].old < reps[k].old
	})
	r := &Redactor{}
	for _, p := range reps {
		r.pairs = append(r.pairs, p.old, p.new)
		r.max = max(r.max, len(p.old))
	}
	return r
}

// String returns s with every credential value replaced.
func (r *Redactor) String(s string) string {
	if r == nil || len(r.pairs) == 0 {
		return s
	}
	return strings.NewReplacer(r.pairs...).Replace(s)
}

// Writer returns a writer that redacts what it passes to w. It holds back
// an unfinished line (up to 64 KiB, then all but the longest value's
// length) so a value split across writes is still found; Close flushes
// the rest. Safe for concurrent writes.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	return &redactWriter{r: r, w: w}
}

type redactWriter struct {
	r   *Redactor
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

func (rw *redactWriter) Write(p []byte) (int, error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.buf = append(rw.buf, p...)
	cut := bytes.LastIndexByte(rw.buf, '\n') + 1
	if cut == 0 && len(rw.buf) > 64<<10 {
		cut = len(rw.buf) - rw.r.max
	}
	if cut > 0 {
		if _, err := io.WriteString(rw.w, rw.r.String(string(rw.buf[:cut]))); err != nil {
			return len(p), err
		}
		rw.buf = append(rw.buf[:0], rw.buf[cut:]...)
	}
	return len(p), nil
}

func (rw *redactWriter) Close() error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if len(rw.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(rw.w, rw.r.String(string(rw.buf)))
	rw.buf = nil
	return err
}
