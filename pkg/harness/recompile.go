package harness

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// RecompileTimeout bounds the task's build commands run again after a
// solve, all of them together.
const RecompileTimeout = 10 * time.Minute

// BuildCommand is one compiler command line of a task's instruction:
// Line as written, Output the program it builds (its -o, else a.out).
type BuildCommand struct {
	Line   string
	Output string
}

// compilerName matches the compilers whose command lines are build
// commands: gcc, g++, clang and clang++, by base name, with an optional
// version suffix (g++-12, clang-17).
var compilerName = regexp.MustCompile(`^(gcc|g\+\+|clang|clang\+\+)(-[0-9][0-9.]*)?$`)

// sourceFile matches the C and C++ source files a build command compiles.
var sourceFile = regexp.MustCompile(`\.(c|cc|cpp|cxx|c\+\+|C)$`)

// BuildCommands returns the compiler command lines of an instruction (the
// task's instruction.md, or a step's), in order and without repeats, as
// the task-runs seed recompiles them: each line of a fenced or indented
// code block and each inline code span (`...`) is a candidate, less a
// leading "$ " prompt; it is a build command when its first word is gcc,
// g++, clang or clang++ (a path to one, or a versioned name such as
// g++-12, counts), it names a C or C++ source file, and it builds a
// program: no -c, -E, -S, -M or -MM, no --version. A line holding a shell
// operator (; & | < > a backquote, $( or a line break) is never one: it
// is more than a compiler's command line. Prose mentioning a compiler
// outside code is not a command.
func BuildCommands(instruction string) []BuildCommand {
	var out []BuildCommand
	seen := map[string]bool{}
	add := func(cand string) {
		cand = strings.TrimSpace(cand)
		cand = strings.TrimSpace(strings.TrimPrefix(cand, "$ "))
		if seen[cand] {
			return
		}
		if bc, ok := buildCommand(cand); ok {
			seen[cand] = true
			out = append(out, bc)
		}
	}
	fence := ""
	for _, line := range strings.Split(strings.ReplaceAll(instruction, "\r\n", "\n"), "\n") {
		trim := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trim, fence) && strings.Trim(trim, fence[:1]) == "" {
				fence = ""
				continue
			}
			add(line)
			continue
		}
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fence = trim[:3]
			continue
		}
		if strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			add(line)
			continue
		}
		for _, span := range inlineCode(line) {
			add(span)
		}
	}
	return out
}

// inlineCode returns the code spans of a Markdown line: text between
// runs of backquotes of equal length.
func inlineCode(line string) []string {
	var spans []string
	for i := 0; i < len(line); {
		if line[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(line) && line[j] == '`' {
			j++
		}
		tick := line[i:j]
		end := strings.Index(line[j:], tick)
		if end < 0 {
			break
		}
		spans = append(spans, line[j:j+end])
		i = j + end + len(tick)
	}
	return spans
}

// buildCommand decides whether one candidate line is a build command.
func buildCommand(line string) (BuildCommand, bool) {
	if line == "" || strings.ContainsAny(line, ";&|<>`\n") || strings.Contains(line, "$(") {
		return BuildCommand{}, false
	}
	words, ok := shellWords(line)
	if !ok || len(words) < 2 || !compilerName.MatchString(path.Base(words[0])) {
		return BuildCommand{}, false
	}
	bc := BuildCommand{Line: line, Output: "a.out"}
	source := false
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-c" || w == "-E" || w == "-S" || w == "-M" || w == "-MM" || w == "--version" || w == "-dumpversion":
			return BuildCommand{}, false
		case w == "-o" && i+1 < len(words):
			bc.Output = words[i+1]
			i++
		case strings.HasPrefix(w, "-o") && len(w) > 2:
			bc.Output = w[2:]
		case !strings.HasPrefix(w, "-") && sourceFile.MatchString(w):
			source = true
		}
	}
	return bc, source && bc.Output != "" && !strings.HasPrefix(bc.Output, "-")
}

// shellWords splits a line into words as sh would (single and double
// quotes, backslash escapes; no expansion); ok false for an unterminated
// quote.
func shellWords(line string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	in, quote, escaped := false, byte(0), false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case escaped:
			cur.WriteByte(c)
			escaped, in = false, true
		case c == '\\' && quote != '\'':
			escaped = true
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 || escaped {
		return nil, false
	}
	if in {
		words = append(words, cur.String())
	}
	return words, true
}

// recompile runs the instruction's build commands (BuildCommands) again in
// the sandbox as root, in the working directory, after the agent's
// processes are gone and before the verifier, as the task-runs seed does:
// so an agent that never built, or left a binary built elsewhere (another
// glibc, a program that only prints the expected answer), is scored on a
// fresh build of its sources. Each command's program is removed first, so
// a build that fails leaves no binary of the agent's behind. The output
// goes to the cell's recompile.log; nil when the instruction names no
// build command. A command that fails or times out stops the rest and is
// recorded (Failed, the output's tail), never an error of the cell: the
// verifier scores what it finds. The error is the sandbox's.
func recompile(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, instruction, workdir string, dir cellfs.Dir) (*events.Recompile, error) {
	cmds := BuildCommands(instruction)
	if len(cmds) == 0 {
		return nil, nil
	}
	rc := &events.Recompile{}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, c := range cmds {
		rc.Commands = append(rc.Commands, c.Line)
		fmt.Fprintf(&script, "rm -f -- %s\necho \"+ \"%s\n%s\n", shq(c.Output), shq(c.Line), c.Line)
	}
	out, err := dir.OpenCapture("recompile.log")
	if err != nil {
		return nil, err
	}
	dir.Logf("recompile as root in %s: %s", workdir, strings.Join(rc.Commands, " ; "))
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", script.String()}, Workdir: workdir, Timeout: RecompileTimeout, Stdout: out, Stderr: out,
	})
	_ = out.Close(dir, "")
	if err != nil {
		return nil, fmt.Errorf("recompile: %w", err)
	}
	rc.ExitCode, rc.TimedOut, rc.DurationSec = res.ExitCode, res.TimedOut, round3(res.Duration.Seconds())
	if res.ExitCode != 0 || res.TimedOut {
		rc.Failed = true
		rc.OutputTail = out.RowTail()
		dir.Logf("recompile failed (exit %d%s): the verifier scores what the sandbox holds; recompile.log", res.ExitCode, map[bool]string{true: ", timed out"}[res.TimedOut])
	}
	return rc, nil
}
