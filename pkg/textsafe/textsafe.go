// Package textsafe makes text that an agent or a task controls safe to
// show to a person. Agents print what they like: a Claude `subtype`, a
// Finished reason, a tool name, tool output and stdout tails reach
// proctor's progress lines, run.log, the Markdown report, `runs show`,
// `watch`, `tasks check` and the viewer. Raw there, an ESC sequence
// could clear the screen, retitle the terminal or hide a line, a CR
// overwrite one, a BEL ring, and a bidirectional override (U+202E)
// reorder what the reader sees. Every human-readable output passes such
// text through Text or Line; machine outputs (JSON, Parquet, the event
// log, the cell's captured logs) keep the exact bytes.
//
// The viewer's app.js holds the same rule as its printable function.
package textsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text returns s as text that is safe to print on a terminal, in
// Markdown or in HTML: valid UTF-8 with no control character but newline
// and tab, and nothing that reorders or hides text. Everything else is
// shown escaped, Go-style, so the bytes stay visible:
//
//   - a byte that is not valid UTF-8: \xNN (e.g. \xff)
//   - a C0 control or DEL: \r, \x00 … \x1f, \x7f (\r\n becomes \n first)
//   - a rune Hidden reports (C1 controls, line and paragraph separators,
//     bidirectional controls, tag characters): \uNNNN or \UNNNNNNNN
//
// A backslash is left as it is, so an escape is ambiguous with the same
// characters written literally; the machine outputs keep the exact text.
// Text of a safe string is the string itself (Text is idempotent), and
// it allocates only when it changes something.
func Text(s string) string { return escape(s, false) }

// Line is Text for text shown on one line (a progress line, a run.log
// line, a field of `runs show`): a newline is escaped as \n as well, and
// \r\n is kept as \r\n, so a reason holding "\n[3/3] passed" cannot fake
// a line of its own.
func Line(s string) string { return escape(s, true) }

// Safe reports whether s is what Text returns: valid UTF-8 without a
// control character other than newline and tab and without a Hidden
// rune.
func Safe(s string) bool { return safe(s, false) }

func escape(s string, oneLine bool) string {
	if safe(s, oneLine) {
		return s
	}
	if !oneLine {
		s = strings.ReplaceAll(s, "\r\n", "\n")
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\n' && oneLine:
			b.WriteString(`\n`)
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case Hidden(r) && r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		case Hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safe reports whether escape would return s unchanged.
func safe(s string, oneLine bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\t' && (c != '\n' || oneLine)) || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size <= 1) || Hidden(r) {
			return false
		}
		i += size
	}
	return true
}

// Hidden reports whether r is a non-ASCII rune Text escapes: a C1
// control (U+0080–U+009F, which terminals read as CSI, OSC, …), a line or
// paragraph separator (U+2028, U+2029), a bidirectional control (the
// marks U+061C, U+200E, U+200F; the embeddings and overrides U+202A–
// U+202E; the isolates U+2066–U+2069), the deprecated format controls
// U+206A–U+206F, or a tag character (U+E0000–U+E007F, invisible text).
func Hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f, r == 0x2028, r == 0x2029:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x206f:
		return true
	case r >= 0xe0000 && r <= 0xe007f:
		return true
	}
	return false
}
