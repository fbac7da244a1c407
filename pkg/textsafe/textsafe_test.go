package textsafe

import (
	"testing"
	"unicode/utf8"
)

var cases = []struct{ in, text, line string }{
	{"plain", "plain", "plain"},
	{"tab\tand\nnewline", "tab\tand\nnewline", `tab	and\nnewline`},
	{"0.5\x00", `0.5\x00`, `0.5\x00`},
	{"crlf\r\nline", "crlf\nline", `crlf\r\nline`},
	{"bar\rover", `bar\rover`, `bar\rover`},
	{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, `\x1b[31mred\x1b[0m`},
	{"\x1b]0;title\x07bell", `\x1b]0;title\x07bell`, `\x1b]0;title\x07bell`},
	{"del\x7f", `del\x7f`, `del\x7f`},
	{"bad \xff\xfe utf8", `bad \xff\xfe utf8`, `bad \xff\xfe utf8`},
	{"c1 \u0085 next line, \u009b csi", `c1 \u0085 next line, \u009b csi`, `c1 \u0085 next line, \u009b csi`},
	{"ls \u2028 ps \u2029", `ls \u2028 ps \u2029`, `ls \u2028 ps \u2029`},
	{"bidi \u202eevil\u202c", `bidi \u202eevil\u202c`, `bidi \u202eevil\u202c`},
	{"isolate \u2066x\u2069", `isolate \u2066x\u2069`, `isolate \u2066x\u2069`},
	{"marks \u200e\u200f\u061c", `marks \u200e\u200f\u061c`, `marks \u200e\u200f\u061c`},
	{"tag \U000e0041", `tag \U000e0041`, `tag \U000e0041`},
	{"accents é, emoji 🙂, ⟶, 👨\u200d👩", "accents é, emoji 🙂, ⟶, 👨\u200d👩", "accents é, emoji 🙂, ⟶, 👨\u200d👩"},
	{"truncated \xe2\x82", `truncated \xe2\x82`, `truncated \xe2\x82`},
	{`back\slash \x00 stays`, `back\slash \x00 stays`, `back\slash \x00 stays`},
	{"fake\n[3/3] t passed", "fake\n[3/3] t passed", `fake\n[3/3] t passed`},
}

func TestText(t *testing.T) {
	for _, c := range cases {
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
		if !Safe(Text(c.in)) || Text(Text(c.in)) != Text(c.in) {
			t.Errorf("Text(%q) = %q is not safe or not idempotent", c.in, Text(c.in))
		}
		if Safe(c.in) != (c.in == c.text) {
			t.Errorf("Safe(%q) = %v", c.in, Safe(c.in))
		}
	}
}

func TestLine(t *testing.T) {
	for _, c := range cases {
		got := Line(c.in)
		if got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
		if !oneSafeLine(got) || Line(got) != got {
			t.Errorf("Line(%q) = %q is not one safe line or not idempotent", c.in, got)
		}
	}
}

func oneSafeLine(s string) bool {
	for _, r := range s {
		if r == '\n' {
			return false
		}
	}
	return Safe(s)
}

// FuzzText: whatever the input, Text is safe and idempotent and Line is
// one safe line.
func FuzzText(f *testing.F) {
	for _, c := range cases {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		txt, line := Text(s), Line(s)
		if !Safe(txt) || !utf8.ValidString(txt) || Text(txt) != txt {
			t.Fatalf("Text(%q) = %q", s, txt)
		}
		if !oneSafeLine(line) || Line(line) != line {
			t.Fatalf("Line(%q) = %q", s, line)
		}
	})
}
