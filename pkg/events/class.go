package events

import (
	"errors"
	"fmt"
)

// ErrorClass says why a cell ended without a verdict (CellErrored and
// CellRefused error_class; DESIGN §8). It is the one vocabulary every
// service, the artifact and the report use.
type ErrorClass string

// Error classes (DESIGN §8).
const (
	// ClassRefused: the harness refused the task before any build.
	ClassRefused ErrorClass = "refused"
	// ClassUnresolvedEnv: a ${VAR} reference or a non-scalar env value.
	ClassUnresolvedEnv ErrorClass = "unresolved_env"
	// ClassBuild: the task image could not be built or pulled.
	ClassBuild ErrorClass = "build"
	// ClassSandbox: the sandbox could not be started or driven.
	ClassSandbox ErrorClass = "sandbox"
	// ClassSolverError: the solver made no attempt (its install failed).
	ClassSolverError ErrorClass = "solver_error"
	// ClassInfra: anything else of proctor's own (files, the task
	// changed), or the model provider failing before the agent made any
	// attempt (a 429, an overloaded provider).
	ClassInfra ErrorClass = "infra"
	// ClassUnavailable: the task never got its budget: proctor's platform
	// cap (agent.toml max_timeout_sec, 900 s by default as Anpord's)
	// ended an agent still running before the task's own timeout.
	ClassUnavailable ErrorClass = "unavailable"
	// ClassCancelled: an operator cancelled the cell (`proctor runs
	// cancel`, the viewer) before it had a verdict; as a Ctrl-C, it is
	// missing data, and never run again by --retries.
	ClassCancelled ErrorClass = "cancelled"
)

// Retryable reports whether a cell errored with class c is run again
// under `tasks run --retries N`: the classes of proctor's own machinery
// (build, sandbox, infra: a flaky build or pull, a sandbox that would not
// start, the event log, a poison cell), never solver_error, refused or
// unresolved_env, which a second attempt would only repeat. A scored cell
// (a Verdict) has no class and is never run again.
func (c ErrorClass) Retryable() bool {
	return c == ClassBuild || c == ClassSandbox || c == ClassInfra
}

// ClassError is an error that ends a cell with a CellErrored of Class. A
// service that gets one records the cell errored and acks its job; any
// other error from a cell's work is the event log's or the engine's and is
// retried (Nak). Find it with errors.As or ClassOf.
type ClassError struct {
	Class ErrorClass
	Err   error
}

func (e *ClassError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ClassError) Unwrap() error { return e.Err }

// Classed wraps err with class; nil stays nil.
func Classed(class ErrorClass, err error) error {
	if err == nil {
		return nil
	}
	return &ClassError{Class: class, Err: err}
}

// Classf is Classed(class, fmt.Errorf(format, args...)).
func Classf(class ErrorClass, format string, args ...any) error {
	return &ClassError{Class: class, Err: fmt.Errorf(format, args...)}
}

// ClassOf returns the class of the first ClassError in err's chain and
// true, or "" and false when err carries none.
func ClassOf(err error) (ErrorClass, bool) {
	var ce *ClassError
	if errors.As(err, &ce) {
		return ce.Class, true
	}
	return "", false
}
