package task

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels returned (wrapped) by the loader. Inspect with errors.Is.
var (
	// ErrNotTask: the directory holds neither task.toml nor task.md.
	ErrNotTask = errors.New("not a task directory: no task.toml or task.md")
	// ErrNoFrontmatter: a lone task.md (no task.toml beside it) does not open
	// with a `---` YAML frontmatter block, so it is an author's note and not a
	// task. Discover skips such a directory with a warning; Load returns this.
	ErrNoFrontmatter = errors.New("task.md has no YAML frontmatter (an author's note, not a task)")
	// ErrTaskNotFound: Select was asked for a name the discovery does not hold.
	ErrTaskNotFound = errors.New("task not found")
	// ErrNoTasks: a tasks root (or a selection) holds no task at all, so a
	// run would be empty.
	ErrNoTasks = errors.New("no tasks")
	// ErrUnknownKeys: a strict Loader met definition keys that neither
	// proctor, Harbor nor BenchFlow defines; the *Error wraps it.
	ErrUnknownKeys = errors.New("unknown definition keys")
)

// Error is a problem with one task file: the file (relative to the tasks
// root, or as given to Load), the 1-based line when known (0 otherwise), the
// dotted key when the problem is one key, and what is wrong. Discover fails
// the whole root with an *Error; inspect it with errors.As.
type Error struct {
	// File is the offending file, relative to the tasks root with forward
	// slashes ("t1/task.md").
	File string `json:"file"`
	// Line is the 1-based line in File, or 0 when unknown.
	Line int `json:"line,omitempty"`
	// Key is the dotted key path ("verifier.timeout_sec"), or "".
	Key string `json:"key,omitempty"`
	// Msg says what is wrong.
	Msg string `json:"message"`
	// Err is the underlying error, if any (a *toml.DecodeError, a sentinel).
	Err error `json:"-"`
}

// Error renders "file:line: key: message".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString("key ")
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// fileError is a problem located in one file; the caller supplies the file
// name when it wraps it into an *Error.
type fileError struct {
	line int
	key  string
	msg  string
	err  error
}

func (e *fileError) Error() string {
	s := e.msg
	if e.key != "" {
		s = "key " + e.key + ": " + s
	}
	if e.line > 0 {
		s = fmt.Sprintf("line %d: %s", e.line, s)
	}
	return s
}

func (e *fileError) Unwrap() error { return e.err }

func errAt(line int, key, format string, args ...any) *fileError {
	return &fileError{line: line, key: key, msg: fmt.Sprintf(format, args...)}
}

// inFile turns err into an *Error naming file. A *fileError keeps its line
// and key; line offsets (frontmatter starting after the opening fence) are
// added by the caller before.
func inFile(file string, err error) *Error {
	var fe *fileError
	if errors.As(err, &fe) {
		return &Error{File: file, Line: fe.line, Key: fe.key, Msg: fe.msg, Err: fe.err}
	}
	var te *Error
	if errors.As(err, &te) {
		return te
	}
	return &Error{File: file, Msg: err.Error(), Err: err}
}
