// Package dockerfile reads the few facts proctor needs from a Dockerfile —
// its build stages (FROM), the defaults of its global ARGs, the working
// directory of its final stage — and rewrites the image operand of a FROM
// instruction in place. Parsing is BuildKit's own
// (github.com/moby/buildkit/frontend/dockerfile/parser), so heredocs, the
// `# escape=` parser directive, line continuations, comments inside
// continuations and a byte order mark are read as the builder reads them;
// variables are expanded by BuildKit's shell lexer, as the builder expands
// a FROM operand with the global ARGs when no --build-arg is given.
package dockerfile

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// File is a parsed Dockerfile. It is immutable and keeps the source it was
// parsed from.
type File struct {
	src    []byte
	lines  []int // byte offset where each physical line starts
	escape rune

	// Stages are the FROM instructions in order.
	Stages []Stage
	// Args are the defaults of the global ARGs (those before the first
	// FROM), after expansion, as the builder reads them without
	// --build-arg. An ARG declared without a default has no entry.
	Args map[string]string
	// Escape is the escape and line-continuation character (`\` unless a
	// `# escape=` directive says "`").
	Escape rune

	instrs []*parser.Node
}

// Stage is one FROM instruction.
type Stage struct {
	// Line is the 1-based line of the FROM keyword.
	Line int
	// Image is the image operand as written ("python:3.11-slim",
	// "${BASE}", "build").
	Image string
	// Ref is Image with variables expanded from the global ARG defaults
	// (Args): "" when the expansion fails, is empty or is not a valid image
	// reference (a variable without a value: `${UNSET}`, `python:${UNSET}`).
	Ref string
	// Name is the stage name of `AS name`, lower-cased as the builder
	// compares it; "" when none.
	Name string
	// Platform is the value of a --platform flag as written, or "".
	Platform string
	// FromStage is true when the operand names an earlier stage (a stage
	// name is not an image: `FROM build AS test`).
	FromStage bool

	imageOff int // byte offset of Image in the source; -1 when not located
}

// Replaceable reports whether the image operand was located in the source
// (see File.ReplaceImages). An operand split across a line continuation is
// not.
func (s Stage) Replaceable() bool { return s.imageOff >= 0 }

// Parse parses a Dockerfile. Errors are BuildKit's (an unterminated
// heredoc, an invalid escape directive, a file with no instructions, a line
// longer than 64 KiB) with the line number.
func Parse(src []byte) (*File, error) { return ParseArgs(src, nil) }

// ParseArgs is Parse for a build given buildArgs (`--build-arg`, compose's
// build.args): a global ARG the file declares takes the build argument's
// value instead of its default, as the builder reads it, so a FROM operand
// with a variable expands as it will be built. A build argument the file
// does not declare as a global ARG changes nothing.
func ParseArgs(src []byte, buildArgs map[string]string) (*File, error) {
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	f := &File{src: src, escape: res.EscapeToken, Escape: res.EscapeToken, Args: map[string]string{}, instrs: res.AST.Children}
	f.lines = append(f.lines, 0)
	for i, c := range src {
		if c == '\n' {
			f.lines = append(f.lines, i+1)
		}
	}
	lex := shell.NewLex(res.EscapeToken)
	stages := map[string]bool{}
	for _, n := range res.AST.Children {
		switch strings.ToLower(n.Value) {
		case "arg":
			if len(f.Stages) > 0 {
				continue // a stage's ARG, not a global one
			}
			for a := n.Next; a != nil; a = a.Next {
				name, val, ok := strings.Cut(a.Value, "=")
				if v, given := buildArgs[name]; given {
					f.Args[name] = v
					continue
				}
				if !ok {
					delete(f.Args, name)
					continue
				}
				v, _, err := lex.ProcessWord(val, shell.EnvsFromSlice(f.env()))
				if err != nil {
					delete(f.Args, name)
					continue
				}
				f.Args[name] = v
			}
		case "from":
			st := f.stage(n, lex)
			key := strings.ToLower(st.Image)
			if st.Ref != "" {
				key = strings.ToLower(st.Ref)
			}
			st.FromStage = stages[key]
			if st.Name != "" {
				stages[st.Name] = true
			}
			f.Stages = append(f.Stages, st)
		}
	}
	return f, nil
}

func (f *File) env() []string {
	out := make([]string, 0, len(f.Args))
	for k, v := range f.Args {
		out = append(out, k+"="+v)
	}
	return out
}

func (f *File) stage(n *parser.Node, lex *shell.Lex) Stage {
	st := Stage{Line: n.StartLine, imageOff: -1}
	for _, fl := range n.Flags {
		if v, ok := strings.CutPrefix(fl, "--platform="); ok {
			st.Platform = v
		}
	}
	if n.Next == nil {
		return st
	}
	st.Image = n.Next.Value
	if as := n.Next.Next; as != nil && strings.EqualFold(as.Value, "AS") && as.Next != nil {
		st.Name = strings.ToLower(as.Next.Value)
	}
	if ref, _, err := lex.ProcessWord(st.Image, shell.EnvsFromSlice(f.env())); err == nil && ref != "" {
		if _, err := reference.ParseNormalizedNamed(ref); err == nil || strings.EqualFold(ref, st.Image) {
			st.Ref = ref
		}
	}
	st.imageOff = f.locate(n, st.Image)
	return st
}

// locate finds the byte offset of the FROM operand image in the physical
// lines of n: the first word after the keyword and the flags, with
// continuation characters and comment lines skipped. It returns -1 when the
// word found is not image as written.
func (f *File) locate(n *parser.Node, image string) int {
	type word struct {
		s   string
		off int
	}
	var words []word
	for ln := n.StartLine; ln <= n.EndLine && ln <= len(f.lines); ln++ {
		start := f.lines[ln-1]
		end := len(f.src)
		if ln < len(f.lines) {
			end = f.lines[ln] - 1
		}
		line := string(f.src[start:end])
		if t := strings.TrimSpace(line); ln > n.StartLine && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		var lw []word
		for i := 0; i < len(line); {
			for i < len(line) && isSpace(line[i]) {
				i++
			}
			j := i
			for j < len(line) && !isSpace(line[j]) {
				j++
			}
			if j > i {
				lw = append(lw, word{line[i:j], start + i})
			}
			i = j
		}
		if ln < n.EndLine && len(lw) > 0 {
			// The continuation character ends the line, alone or glued.
			last := &lw[len(lw)-1]
			last.s = strings.TrimSuffix(last.s, string(f.escape))
			if last.s == "" {
				lw = lw[:len(lw)-1]
			}
		}
		words = append(words, lw...)
	}
	k := 1 // words[0] is the keyword
	for k < len(words) && strings.HasPrefix(words[k].s, "--") {
		k++
	}
	if k >= len(words) || words[k].s != image {
		return -1
	}
	return words[k].off
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// ReplaceImages returns the source with the image operand of stage i
// replaced by to for each entry of repl (keyed by index into Stages), and
// every other byte (flags, `AS name`, comments, line endings) kept as it
// is. Entries for stages that are not Replaceable are ignored; with nothing
// replaced the source itself is returned.
func (f *File) ReplaceImages(repl map[int]string) []byte {
	idx := make([]int, 0, len(repl))
	for i := range repl {
		if i >= 0 && i < len(f.Stages) && f.Stages[i].Replaceable() {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return f.src
	}
	slices.Sort(idx)
	var out bytes.Buffer
	out.Grow(len(f.src))
	prev := 0
	for _, i := range idx {
		st := f.Stages[i]
		out.Write(f.src[prev:st.imageOff])
		out.WriteString(repl[i])
		prev = st.imageOff + len(st.Image)
	}
	out.Write(f.src[prev:])
	return out.Bytes()
}

// FinalWorkdir returns the working directory the final stage leaves the
// image in, when the file alone decides it: the last WORKDIR of the final
// stage (a relative one joined onto the previous), or of the stage it is
// built FROM. It returns "" when the final stage sets no WORKDIR (the base
// image's applies, known only after a build) or a WORKDIR uses a variable.
func (f *File) FinalWorkdir() string {
	type wd struct {
		dir   string
		known bool
	}
	byStage := map[string]wd{}
	var cur wd
	curName := ""
	si := 0
	for _, n := range f.instrs {
		switch strings.ToLower(n.Value) {
		case "from":
			st := f.Stages[si]
			si++
			cur = wd{}
			if st.FromStage {
				key := strings.ToLower(st.Image)
				if st.Ref != "" {
					key = strings.ToLower(st.Ref)
				}
				cur = byStage[key]
			}
			curName = st.Name
		case "workdir":
			dir := ""
			if n.Next != nil {
				dir = strings.Trim(strings.TrimSpace(n.Next.Value), `"'`)
			}
			switch {
			case dir == "" || strings.Contains(dir, "$"):
				cur = wd{}
			case strings.HasPrefix(dir, "/"):
				cur = wd{dir: path.Clean(dir), known: true}
			case cur.known:
				cur = wd{dir: path.Join(cur.dir, dir), known: true}
			default:
				cur = wd{}
			}
		default:
			continue
		}
		if curName != "" {
			byStage[curName] = cur
		}
	}
	if !cur.known {
		return ""
	}
	return cur.dir
}
