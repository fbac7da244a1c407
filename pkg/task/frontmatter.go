package task

import (
	"bytes"
	"strings"
)

// Document is a task.md split into its YAML frontmatter and Markdown body.
type Document struct {
	// HasFrontmatter is true when the file opens with a `---` line that a
	// later `---` line closes.
	HasFrontmatter bool
	// Frontmatter is the YAML text between the fences ("" when none).
	Frontmatter string
	// FrontmatterLine is the 1-based line of the file where Frontmatter
	// starts (2 when there is frontmatter: the line after the opening fence).
	FrontmatterLine int
	// Body is the text after the closing fence (the whole text when there is
	// no frontmatter).
	Body string
	// BodyLine is the 1-based line of the file where Body starts.
	BodyLine int
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// normalizeText strips a leading UTF-8 byte order mark and turns CRLF line
// endings into LF, as real checkouts written on Windows need.
func normalizeText(data []byte) string {
	data = bytes.TrimPrefix(data, utf8BOM)
	if bytes.IndexByte(data, '\r') >= 0 {
		data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	}
	return string(data)
}

// SplitFrontmatter splits task.md text into frontmatter and body, following
// BenchFlow's task.md reader: a leading UTF-8 BOM is dropped, CRLF becomes
// LF, the first line must be `---` (surrounding blanks allowed) to open a
// frontmatter block, and the first later line that is `---` (surrounding
// blanks allowed) closes it. A file whose first line is anything else —
// including Hugo's `+++` TOML fence — has no frontmatter (HasFrontmatter is
// false, Body is the whole text, err is nil).
//
// A block that is opened but never closed (an unclosed block, or a Markdown
// horizontal rule on the first line) returns an error naming line 1; the
// frontmatter's YAML is not parsed here.
func SplitFrontmatter(data []byte) (Document, error) {
	text := normalizeText(data)
	first, rest, found := strings.Cut(text, "\n")
	if strings.TrimSpace(first) != "---" {
		return Document{Body: text, BodyLine: 1}, nil
	}
	if !found {
		return Document{}, errAt(1, "", "frontmatter opened with --- is never closed by a --- line")
	}
	line := 2
	off := 0
	for off <= len(rest) {
		end := strings.IndexByte(rest[off:], '\n')
		var cur string
		next := len(rest) + 1
		if end < 0 {
			cur = rest[off:]
		} else {
			cur = rest[off : off+end]
			next = off + end + 1
		}
		if strings.TrimSpace(cur) == "---" {
			body := ""
			if next <= len(rest) {
				body = rest[next:]
			}
			return Document{
				HasFrontmatter:  true,
				Frontmatter:     rest[:off],
				FrontmatterLine: 2,
				Body:            body,
				BodyLine:        line + 1,
			}, nil
		}
		if end < 0 {
			break
		}
		off = next
		line++
	}
	return Document{}, errAt(1, "", "frontmatter opened with --- is never closed by a --- line")
}
