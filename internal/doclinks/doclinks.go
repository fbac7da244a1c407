// Package doclinks checks that the relative links of the project's Markdown
// documentation resolve: README.md and every .md file under docs/.
package doclinks

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Broken is one link whose target does not exist.
type Broken struct {
	// File is the Markdown file holding the link, relative to the root,
	// with a slash separator; Line is its 1-based line.
	File string
	Line int
	// Target is the link as written.
	Target string
	// Reason says what is missing: the file, or the heading of an anchor.
	Reason string
}

func (b Broken) String() string {
	return fmt.Sprintf("%s:%d: link %s: %s", b.File, b.Line, b.Target, b.Reason)
}

// Files returns README.md and every .md file under docs/ of root, relative
// to root and sorted.
func Files(root string) ([]string, error) {
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

var (
	linkRE  = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	fenceRE = regexp.MustCompile("^\\s*(```|~~~)")
	codeRE  = regexp.MustCompile("`[^`]*`")
)

// Check reads files (relative to root) and returns every relative link of
// theirs whose file does not exist under root, or whose #anchor names no
// heading of the Markdown file it points at. Links with a scheme
// (https:, mailto:) are not checked; neither is text in code spans or
// fenced blocks. It returns an error when a file cannot be read.
func Check(root string, files []string) ([]Broken, error) {
	var out []Broken
	anchors := map[string]map[string]bool{}
	headings := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		a := Anchors(string(b))
		anchors[file] = a
		return a, nil
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		fence := false
		for i, line := range strings.Split(string(b), "\n") {
			if fenceRE.MatchString(line) {
				fence = !fence
				continue
			}
			if fence {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, ":") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := f
				if path != "" {
					dest = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						out = append(out, Broken{File: f, Line: i + 1, Target: target, Reason: "no such file " + dest})
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				a, err := headings(dest)
				if err != nil {
					return nil, err
				}
				if !a[frag] {
					out = append(out, Broken{File: f, Line: i + 1, Target: target, Reason: "no heading #" + frag + " in " + dest})
				}
			}
		}
	}
	return out, nil
}

// Anchors returns the anchors GitHub gives the headings of a Markdown text:
// the heading lower-cased, every character but letters, digits, spaces,
// hyphens and underscores removed, spaces made hyphens; a repeated anchor
// gets -1, -2, ....
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(md, "\n") {
		if fenceRE.MatchString(line) {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var s strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				s.WriteRune(r)
			case r == ' ':
				s.WriteByte('-')
			}
		}
		a := s.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
