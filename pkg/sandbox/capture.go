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
// NewLines(fn, 0): 1 MiB. Longer lines are delivered cut at that length
// (and the rest handed on in pieces by NewLinesRest).
const DefaultMaxLine = 1 << 20

// Lines is an io.Writer that splits a stream into lines and calls a
// function for each complete line, and for the final partial line on Close.
// Lines is safe for concurrent use; the function is called with the Lines
// lock held, one line at a time, in stream order.
//
// A line longer than the bound is delivered cut to the bound (at a rune
// boundary) with truncated set, as soon as the bound is reached; the rest
// of that line is counted and dropped (or handed on, by NewLinesRest), so
// memory stays bounded by the bound and capture never stops.
type Lines struct {
	mu      sync.Mutex
	fn      func(line string, truncated bool)
	rest    func(piece string, end bool) // nil: the rest of an overlong line is dropped
	max     int
	buf     []byte
	skip    bool   // past the bound of an overlong line
	carry   []byte // with rest: a "\r" or an incomplete rune held for the next piece
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

// NewLinesRest is NewLines that hands on the rest of an overlong line
// instead of dropping it: after fn got the line's first max bytes
// (truncated true), rest gets every later byte of that line as it is
// written, in non-empty pieces of valid UTF-8 (a rune split at the cut or
// between writes is joined, invalid bytes become U+FFFD, the "\r" before
// the newline is removed), then rest("", true) once at the line's end (its
// newline, or Close). rest is called under the same lock as fn, in stream
// order; memory stays bounded by max.
func NewLinesRest(fn func(line string, truncated bool), rest func(piece string, end bool), max int) *Lines {
	l := NewLines(fn, max)
	l.rest = rest
	return l
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
		eol := i >= 0
		switch {
		case l.skip && l.rest != nil:
			l.restPiece(chunk, eol)
		case l.skip:
			l.dropped += int64(len(chunk))
		default:
			room := l.max - len(l.buf)
			if len(chunk) > room {
				l.buf = append(l.buf, chunk[:room]...)
				cut := l.emit(true)
				l.skip = true
				if l.rest != nil {
					l.carry = append(l.carry[:0], cut...)
					l.restPiece(chunk[room:], eol)
				} else {
					l.dropped += int64(len(cut) + len(chunk) - room)
				}
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		if eol {
			if !l.skip {
				l.emit(false)
			}
			l.skip = false
		}
	}
	return n, nil
}

// restPiece hands b, the next bytes of an overlong line, to l.rest: the
// carried bytes first, and a trailing "\r" or incomplete rune held back
// for the next piece unless the line ends here (eol), when a "\r" at the
// end is dropped and rest("", true) follows.
func (l *Lines) restPiece(b []byte, eol bool) {
	data := make([]byte, 0, len(l.carry)+len(b))
	data = append(append(data, l.carry...), b...)
	l.carry = l.carry[:0]
	keep := len(data)
	switch {
	case eol:
		data = bytes.TrimSuffix(data, []byte("\r"))
		keep = len(data)
	case keep > 0 && data[keep-1] == '\r':
		keep--
	default:
		keep -= len(incompleteRune(data))
	}
	l.carry = append(l.carry, data[keep:]...)
	if keep > 0 {
		l.rest(strings.ToValidUTF8(string(data[:keep]), "\uFFFD"), false)
	}
	if eol {
		l.rest("", true)
	}
}

// incompleteRune returns the incomplete rune (at most 3 bytes) that b ends
// with, if any.
func incompleteRune(b []byte) []byte {
	for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return b[len(b)-k:]
			}
			break
		}
	}
	return nil
}

// emit delivers l.buf and resets it. A truncated line is cut back to a
// rune boundary so the cut does not make U+FFFD; emit returns the bytes
// it cut (an incomplete rune, at most 3 bytes; valid until the next
// append to l.buf).
func (l *Lines) emit(truncated bool) []byte {
	b := l.buf
	var cut []byte
	if truncated {
		cut = incompleteRune(b)
		b = b[:len(b)-len(cut)]
	} else {
		b = bytes.TrimSuffix(b, []byte("\r"))
	}
	l.lines++
	l.fn(strings.ToValidUTF8(string(b), "\uFFFD"), truncated)
	l.buf = l.buf[:0]
	if cap(l.buf) > 64<<10 {
		l.buf = nil // do not pin a megabyte buffer after one long line
	}
	return cut
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
	switch {
	case l.skip && l.rest != nil:
		l.restPiece(nil, true)
	case len(l.buf) > 0 && !l.skip:
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

// Dropped returns the number of bytes of overlong lines dropped so far
// (0 with NewLinesRest, which hands them on).
func (l *Lines) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}
