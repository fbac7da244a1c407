package sandbox

import (
	"context"
	"slices"
	"sync"
)

// ExecPreparer does an Exec's engine work ahead of the moment its command
// may run (see Docker.PrepareExec): the process is made and waits, and
// PreparedExec.Run only lets it go. A scheduler prepares a solve with its
// sandbox and releases it when a solve slot is free, so the slot is not
// spent on the engine's exec create and start.
type ExecPreparer interface {
	PrepareExec(ctx context.Context, h *Handle, spec ExecSpec) (PreparedExec, error)
}

// PreparedExec is one command made ready by PrepareExec (or by the
// deferred fallback of PrepareExec for drivers without the ability).
// Its owner calls Run once, or Discard; Discard after Run does nothing.
//
//   - Before Run, nothing of spec.Cmd has run: the command's first act
//     happens after Run is called, never before.
//   - Run behaves as Exec of the same spec called at that moment: the
//     Timeout, the kill of the command's processes at the timeout or at
//     ctx's end, a Hold in ctx (the command is released only once the
//     Hold is thawed, and frozen time is not counted), the output, the
//     result. The Timeout and Duration count from Run, not from
//     PrepareExec.
//   - Discard ends the waiting process without running the command; so
//     does destroying the sandbox. A Run after Discard is an error.
type PreparedExec interface {
	Run(ctx context.Context) (ExecResult, error)
	Discard()
}

// PrepareExec prepares spec in h with d's ExecPreparer when d declares
// it (AbilitiesOf), else returns a PreparedExec whose Run calls d.Exec
// (nothing is done ahead; the contract holds all the same).
func PrepareExec(ctx context.Context, d Driver, h *Handle, spec ExecSpec) (PreparedExec, error) {
	if p, ok := d.(ExecPreparer); ok && slices.Contains(AbilitiesOf(d), AbilityExecPreparer) {
		return p.PrepareExec(ctx, h, spec)
	}
	return &deferredExec{d: d, h: h, spec: spec}, nil
}

// deferredExec is PrepareExec's fallback: the Exec happens at Run.
type deferredExec struct {
	d    Driver
	h    *Handle
	spec ExecSpec
	mu   sync.Mutex
	used bool
}

func (e *deferredExec) Run(ctx context.Context) (ExecResult, error) {
	e.mu.Lock()
	done := e.used
	e.used = true
	e.mu.Unlock()
	if done {
		return ExecResult{}, ErrPreparedUsed
	}
	return e.d.Exec(ctx, e.h, e.spec)
}

func (e *deferredExec) Discard() {
	e.mu.Lock()
	e.used = true
	e.mu.Unlock()
}
