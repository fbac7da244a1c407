package artifact

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable returns s as text that is safe to print in the Markdown report
// or on a terminal: valid UTF-8 with no control character but newline and
// tab. Everything else that the artifact may carry from hostile or broken
// output is shown escaped, Go-style, so the bytes stay visible:
//
//   - a byte that is not valid UTF-8: \xNN (e.g. \xff)
//   - a C0 control or DEL: \r, \x00 … \x1f, \x7f (\r\n becomes \n first)
//   - a C1 control (U+0080–U+009F), a line or paragraph separator
//     (U+2028, U+2029) or a bidirectional override or isolate (U+202A–
//     U+202E, U+2066–U+2069, which can reorder what a reader sees): \uNNNN
//
// A backslash is left as it is, so an escape is ambiguous with the same
// characters written literally; the artifact keeps the exact text.
// Printable of a printable string is the string itself.
func Printable(s string) string {
	if isPrintable(s) {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isPrintable reports whether Printable would return s unchanged.
func isPrintable(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || hidden(r) {
			return false
		}
		i += size
	}
	return true
}

// hidden reports whether r is a non-ASCII rune Printable escapes: a C1
// control, a line or paragraph separator, or a bidirectional control.
func hidden(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || r == 0x2028 || r == 0x2029 ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
