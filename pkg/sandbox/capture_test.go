package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size      int
		writes    []string
		want      string
		total     int64
		truncated int64
	}{
		{"empty", 8, nil, "", 0, 0},
		{"fits", 8, []string{"abc", "def"}, "abcdef", 6, 0},
		{"exactly full", 4, []string{"ab", "cd"}, "abcd", 4, 0},
		{"wraps", 4, []string{"abc", "def"}, "cdef", 6, 2},
		{"wraps many times", 3, []string{"a", "b", "c", "d", "e", "f", "g"}, "efg", 7, 4},
		{"one big write", 4, []string{"0123456789"}, "6789", 10, 6},
		{"big write after small", 4, []string{"xy", "0123456789", "z"}, "789z", 13, 9},
		// "é" is c3 a9: a cut inside it at the start is dropped, not
		// replaced.
		{"cut rune at start", 3, []string{"aé", "bc"}, "bc", 5, 2},
		{"cut 4-byte rune", 4, []string{"😀😀"}, "😀", 8, 4},
		{"cut 4-byte rune mid", 5, []string{"x😀y"}, "😀y", 6, 1},
		{"invalid bytes replaced", 16, []string{"ok \xff\xfe!"}, "ok \uFFFD!", 6, 0},
		{"partial rune at end replaced", 16, []string{"ab\xe2\x82"}, "ab\uFFFD", 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTail(tc.size)
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d %v", n, err)
				}
			}
			got := tl.String()
			if got != tc.want || tl.Total() != tc.total || tl.Truncated() != tc.truncated {
				t.Fatalf("got %q total %d truncated %d; want %q %d %d", got, tl.Total(), tl.Truncated(), tc.want, tc.total, tc.truncated)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("invalid UTF-8 %q", got)
			}
		})
	}
}

func TestTailMatchesSuffix(t *testing.T) {
	// Writes of every size keep exactly the last Size bytes.
	var all bytes.Buffer
	tl := NewTail(1000)
	for i := 1; i < 400; i += 7 {
		chunk := bytes.Repeat([]byte{byte('a' + i%26)}, i)
		all.Write(chunk)
		tl.Write(chunk)
		want := all.Bytes()
		if len(want) > 1000 {
			want = want[len(want)-1000:]
		}
		if !bytes.Equal(tl.Bytes(), want) {
			t.Fatalf("after %d bytes the tail differs", all.Len())
		}
	}
	if NewTail(0).Size() != DefaultTailSize {
		t.Fatal("default size")
	}
}

func TestLines(t *testing.T) {
	type line struct {
		s  string
		tr bool
	}
	for _, tc := range []struct {
		name    string
		max     int
		writes  []string
		want    []line
		dropped int64
	}{
		{"simple", 100, []string{"a\nb\n"}, []line{{"a", false}, {"b", false}}, 0},
		{"split across writes", 100, []string{"he", "llo\nwor", "ld\n"}, []line{{"hello", false}, {"world", false}}, 0},
		{"final partial line on Close", 100, []string{"a\nlast"}, []line{{"a", false}, {"last", false}}, 0},
		{"crlf", 100, []string{"a\r\nb\r\n"}, []line{{"a", false}, {"b", false}}, 0},
		{"empty lines", 100, []string{"\n\nx\n"}, []line{{"", false}, {"", false}, {"x", false}}, 0},
		{"long line truncated, capture goes on", 4, []string{"abcdefgh\nij\n"}, []line{{"abcd", true}, {"ij", false}}, 4},
		{"long line over several writes", 4, []string{"ab", "cdef", "gh", "\nok\n"}, []line{{"abcd", true}, {"ok", false}}, 4},
		{"exactly max is whole", 4, []string{"abcd\n"}, []line{{"abcd", false}}, 0},
		{"long final line", 4, []string{"abcdefgh"}, []line{{"abcd", true}}, 4},
		{"cut on rune boundary", 4, []string{"abcé\n"}, []line{{"abc", true}}, 2},
		{"invalid utf8 replaced", 100, []string{"x\xffy\n"}, []line{{"x\uFFFDy", false}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []line
			l := NewLines(func(s string, tr bool) { got = append(got, line{s, tr}) }, tc.max)
			for _, w := range tc.writes {
				if n, err := l.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write: %d %v", n, err)
				}
			}
			l.Close()
			l.Close()
			l.Write([]byte("after close\n"))
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("line %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
			if l.Dropped() != tc.dropped || l.Count() != int64(len(tc.want)) {
				t.Fatalf("dropped %d count %d", l.Dropped(), l.Count())
			}
		})
	}
}

// TestLinesRest: with a rest function, an overlong line's first max bytes
// go to fn (truncated) and everything after them to rest, as valid UTF-8
// pieces (a rune split at the cut or between writes joined, the "\r"
// before the newline removed), then rest("", true) at the line's end; a
// line that fits never reaches rest.
func TestLinesRest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int
		writes []string
		want   string // fn's lines as [line] or [line…], rest's pieces as <piece>, its ends as |
	}{
		{"fits", 4, []string{"abcd\nef\n"}, "[abcd][ef]"},
		{"one write", 4, []string{"abcdefgh\nij\n"}, "[abcd…]<efgh>|[ij]"},
		{"several writes", 4, []string{"ab", "cdef", "gh", "\nok\n"}, "[abcd…]<ef><gh>|[ok]"},
		{"rune at the cut", 4, []string{"abcé\n"}, "[abc…]<é>|"},
		{"rune split between writes", 2, []string{"abc\xc3", "\xa9d\n"}, "[ab…]<c><éd>|"},
		{"crlf split between writes", 2, []string{"abcd\r", "\nx\n"}, "[ab…]<cd>|[x]"},
		{"a lone cr is kept", 2, []string{"abc\r", "d\n"}, "[ab…]<c><\rd>|"},
		{"invalid bytes replaced", 2, []string{"ab\xffc\n"}, "[ab…]<\uFFFDc>|"},
		{"final line ends at Close", 2, []string{"abcd"}, "[ab…]<cd>|"},
		{"final incomplete rune at Close", 2, []string{"abc\xc3"}, "[ab…]<c><\uFFFD>|"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got strings.Builder
			l := NewLinesRest(func(s string, tr bool) {
				if tr {
					s += "…"
				}
				got.WriteString("[" + s + "]")
			}, func(piece string, end bool) {
				if !utf8.ValidString(piece) {
					t.Errorf("piece %q is not valid UTF-8", piece)
				}
				switch {
				case end && piece != "":
					t.Errorf("end with piece %q", piece)
				case end:
					got.WriteString("|")
				case piece == "":
					t.Error("empty piece")
				default:
					got.WriteString("<" + piece + ">")
				}
			}, tc.max)
			for _, w := range tc.writes {
				l.Write([]byte(w))
			}
			l.Close()
			if got.String() != tc.want {
				t.Fatalf("got %s, want %s", got.String(), tc.want)
			}
			if l.Dropped() != 0 {
				t.Fatalf("dropped %d bytes", l.Dropped())
			}
		})
	}
}

func TestLinesBoundedMemory(t *testing.T) {
	// A 50 MB line through io.Copy: one truncated line of DefaultMaxLine
	// bytes, then the next line whole.
	var n int
	var first string
	var last string
	l := NewLines(func(s string, tr bool) {
		n++
		if n == 1 {
			first = s
		}
		last = s
	}, 0)
	big := io.MultiReader(strings.NewReader(strings.Repeat("x", 50<<20)), strings.NewReader("\nnext\n"))
	if _, err := io.Copy(l, big); err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(first) != DefaultMaxLine || last != "next" {
		t.Fatalf("%d lines, first %d bytes, last %q", n, len(first), last)
	}
	if cap(l.buf) > DefaultMaxLine {
		t.Fatalf("buffer grew to %d bytes", cap(l.buf))
	}
}

func TestCaptureComposesWithMultiWriter(t *testing.T) {
	tail := NewTail(8)
	var lines []string
	lw := NewLines(func(s string, _ bool) { lines = append(lines, s) }, 0)
	var full bytes.Buffer
	w := io.MultiWriter(&full, tail, lw)
	io.WriteString(w, "one\ntwo\nthree")
	lw.Close()
	if full.String() != "one\ntwo\nthree" || tail.String() != "wo\nthree" || strings.Join(lines, ",") != "one,two,three" {
		t.Fatalf("full %q tail %q lines %q", full.String(), tail.String(), lines)
	}
}

func TestLastLogLines(t *testing.T) {
	log := "Step 1/2 : FROM debian:bookworm-slim\n ---> 6a80fa0d067d\nStep 2/2 : RUN apt-get install -y foo\n ---> Running in 0123abcd\n" +
		"Reading package lists...\nBuilding dependency tree...\n\nE: Unable to locate package foo\n" +
		"The command '/bin/sh -c apt-get install -y foo' returned a non-zero code: 100\n"
	got := LastLogLines(log, "The command '/bin/sh -c apt-get install -y foo' returned a non-zero code: 100")
	if want := "Reading package lists...\nBuilding dependency tree...\nE: Unable to locate package foo"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := LastLogLines("Step 1/1 : FROM x\n ---> abc\n", "boom"); got != "" {
		t.Fatalf("only builder progress: %q", got)
	}
	// Only the last step's lines: a step that failed silently borrows
	// nothing from the one before; a line of its own that starts with
	// "Step" is kept.
	if got := LastLogLines("Step 2/3 : RUN echo fine\n ---> Running in 1\nfine\n ---> 2\nStep 3/3 : RUN exit 3\n ---> Running in 3\nboom\n", "boom"); got != "" {
		t.Fatalf("a silent last step: %q", got)
	}
	if got := LastLogLines("Step 3/3 : RUN x\n ---> Running in 3\nStep one failed\nboom\n", "boom"); got != "Step one failed" {
		t.Fatalf("a step's own Step line: %q", got)
	}
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "line %d %s\n", i, strings.Repeat("é", 400))
	}
	got = LastLogLines(b.String(), "")
	lines := strings.Split(got, "\n")
	if len(lines) > 5 || len(got) > 1024+5 || !strings.HasPrefix(lines[len(lines)-1], "line 19 ") || !utf8.ValidString(got) {
		t.Fatalf("long lines: %d lines, %d bytes, valid %v", len(lines), len(got), utf8.ValidString(got))
	}
}
