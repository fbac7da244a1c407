package artifact

import "github.com/proctor-eval/proctor/pkg/textsafe"

// Printable returns s as text that is safe to print in the Markdown report
// or on a terminal: textsafe.Text, the one rule every human-readable
// output of proctor follows (valid UTF-8, no control character but
// newline and tab, bidirectional controls and other hidden runes shown
// escaped, e.g. \x1b, \u202e). The artifact keeps the exact text.
func Printable(s string) string { return textsafe.Text(s) }
