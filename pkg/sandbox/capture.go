package sandbox

import (
	"bytes"
	"strings"
	"sync"
	"unicode/utf8"
)

// DefaultTailSize is the number of bytes a Tail keeps when made with
// NewTail(0): the last 64 KiB of a stream, the bound on the stdout and
// stderr tails kept per cell.
const DefaultTailSize = 64 << 10

// Tail is an io.Writer that keeps the last Size bytes written to it and
// counts the rest. Its Write never fails and never blocks on anything but
// its own lock; it is safe for concurrent use, so one Tail can take both
// stdout and stderr. Compose it with a log file or Lines through
// io.MultiWriter.
type Tail struct {
	mu    sync.Mutex
	size  int
	buf   []byte // ring of cap size once full
	start int    // index of the oldest byte when full
	full  bool
	total int64
}

// NewTail returns a Tail keeping the last size bytes; size <= 0 means
// DefaultTailSize.
func NewTail(size int) *Tail {
	if size <= 0 {
		size = DefaultTailSize
	}
	return &Tail{size: size, buf: make([]byte, 0, min(size, 4096))}
}

// Write implements io.Writer; it always returns len(p), nil.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.total += int64(n)
	if n >= t.size {
		// p alone fills the ring.
		t.buf = append(t.buf[:0], p[n-t.size:]...)
		t.start, t.full = 0, true
		return n, nil
	}
	if !t.full {
		if len(t.buf)+n <= t.size {
			t.buf = append(t.buf, p...)
			if len(t.buf) == t.size {
				t.full = true
			}
			return n, nil
		}
		// Grow to the full ring, then fall through to ring writes.
		old := t.buf
		t.buf = make([]byte, t.size)
		copy(t.buf, old)
		fill := t.size - len(old)
		copy(t.buf[len(old):], p[:fill])
		p = p[fill:]
		t.start, t.full = 0, true
	}
	for len(p) > 0 {
		c := copy(t.buf[t.start:], p)
		p = p[c:]
		t.start = (t.start + c) % t.size
	}
	return n, nil
}

// Bytes returns a copy of the bytes kept (the last Size bytes, or all of
// them when fewer were written), raw, possibly cut inside a UTF-8 rune.
func (t *Tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return bytes.Clone(t.buf)
	}
	out := make([]byte, 0, t.size)
	out = append(out, t.buf[t.start:]...)
	return append(out, t.buf[:t.start]...)
}

// String returns the kept bytes as valid UTF-8: when the stream was
// truncated, the partial rune at the start (up to 3 continuation bytes) is
// dropped; every other invalid byte sequence is replaced by U+FFFD.
func (t *Tail) String() string {
	b := t.Bytes()
	if t.Truncated() > 0 {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// Total returns the number of bytes written so far.
func (t *Tail) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Truncated returns the number of bytes written but no longer kept
// (0 when the whole stream is kept).
func (t *Tail) Truncated() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total - int64(len(t.buf))
}

// Size returns the number of bytes the Tail keeps at most.
func (t *Tail) Size() int { return t.size }

// DefaultMaxLine is the longest line Lines delivers whole when made with
// NewLines(fn, 0): 1 MiB. Longer lines are delivered cut at that length.
const DefaultMaxLine = 1 << 20

// Lines is an io.Writer that splits a stream into lines and calls a
// function for each complete line, and for the final partial line on Close.
// Lines is safe for concurrent use; the function is called with the Lines
// lock held, one line at a time, in stream order.
//
// A line longer than the bound is delivered cut to the bound (at a rune
// boundary) with truncated set, as soon as the bound is reached; the rest
// of that line is counted and dropped, so memory stays bounded by the bound
// and capture never stops.
type Lines struct {
	mu      sync.Mutex
	fn      func(line string, truncated bool)
	max     int
	buf     []byte
	skip    bool // dropping the rest of an overlong line
	lines   int64
	dropped int64
	closed  bool
}

// NewLines returns a Lines calling fn for each line. The line passed to fn
// has its "\n" (and a "\r" before it) removed and invalid UTF-8 replaced by
// U+FFFD; truncated is true when the line was longer than max bytes and
// only its first max bytes (fewer, to end on a rune boundary) are given.
// max <= 0 means DefaultMaxLine.
func NewLines(fn func(line string, truncated bool), max int) *Lines {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &Lines{fn: fn, max: max}
}

// Write implements io.Writer; it always returns len(p), nil, also after
// Close (bytes written after Close are dropped).
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if l.closed {
		return n, nil
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		var chunk []byte
		if i < 0 {
			chunk = p
			p = nil
		} else {
			chunk = p[:i]
			p = p[i+1:]
		}
		if l.skip {
			l.dropped += int64(len(chunk))
		} else {
			room := l.max - len(l.buf)
			if len(chunk) > room {
				l.buf = append(l.buf, chunk[:room]...)
				l.dropped += int64(len(chunk) - room)
				l.emit(true)
				l.skip = true
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		if i >= 0 {
			if !l.skip {
				l.emit(false)
			}
			l.skip = false
		}
	}
	return n, nil
}

// emit delivers l.buf and resets it.
func (l *Lines) emit(truncated bool) {
	b := l.buf
	if truncated {
		// Cut back to a rune boundary so the cut does not make U+FFFD:
		// drop an incomplete rune (at most 3 bytes) at the end.
		end := len(b)
		for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
			if utf8.RuneStart(b[len(b)-k]) {
				if !utf8.FullRune(b[len(b)-k:]) {
					end = len(b) - k
				}
				break
			}
		}
		l.dropped += int64(len(b) - end)
		b = b[:end]
	} else {
		b = bytes.TrimSuffix(b, []byte("\r"))
	}
	l.lines++
	l.fn(strings.ToValidUTF8(string(b), "\uFFFD"), truncated)
	l.buf = l.buf[:0]
	if cap(l.buf) > 64<<10 {
		l.buf = nil // do not pin a megabyte buffer after one long line
	}
}

// Close delivers the final partial line, if any, and stops delivery. It
// always returns nil and is idempotent.
func (l *Lines) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if len(l.buf) > 0 && !l.skip {
		l.emit(false)
	}
	return nil
}

// Count returns the number of lines delivered so far.
func (l *Lines) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines
}

// Dropped returns the number of bytes of overlong lines dropped so far.
func (l *Lines) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}
