package docker

import (
	"strings"
	"testing"
)

// TestPlainWriter: a build log is stored as plain text, whatever the
// commands of the build print.
func TestPlainWriter(t *testing.T) {
	var out strings.Builder
	w := newPlainWriter(&out)
	for _, chunk := range []string{
		"\x1b[1;31mE: \x1b[0mUnable to locate package foo\n",
		"Get:1 http://deb\x1b", "[32m ok\x1b[0m\n", // an escape split across writes
		"progress  10%\rprogress  50%\rprogress 100%\r\n",
		"\x1b]0;window title\x07tab\there\a bell\n",
		"crlf line\r\n",
		"no newline at the end \x1b[K",
	} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write: %d %v", n, err)
		}
	}
	w.Flush()
	want := "E: Unable to locate package foo\nGet:1 http://deb ok\nprogress 100%\ntab\there bell\ncrlf line\nno newline at the end "
	if out.String() != want {
		t.Fatalf("got %q\nwant %q", out.String(), want)
	}
	// A line longer than the buffer is written in pieces, nothing lost.
	out.Reset()
	long := strings.Repeat("x", maxPlainLine+10)
	w.Write([]byte(long + "\n"))
	if out.String() != long+"\n" {
		t.Fatalf("long line: %d bytes", out.Len())
	}
}
