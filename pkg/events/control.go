package events

import "strings"

// Control actions (RunControlData.Action): what an operator (or a cap of
// the run) asks of a running run on its control subject.
const (
	// ControlCancel stops cells (RunControlData.Cells, or every cell of
	// the run when empty): a running cell is stopped as a Ctrl-C stops
	// it (its sandbox removed, the cell errored, class cancelled), a
	// queued one never starts (errored, class cancelled, when a launcher
	// drains its job).
	ControlCancel = "cancel"
	// ControlPause stops new cells from starting; running cells finish,
	// or, with RunControlData.Now, their sandboxes are frozen where the
	// driver can (sandbox.Freezer).
	ControlPause = "pause"
	// ControlContinue lifts a pause and thaws what it froze.
	ControlContinue = "continue"
	// ControlRequeue runs RunControlData.Cells again, each as a new
	// attempt (RunControlData.Attempts holds the attempt each replaces).
	ControlRequeue = "requeue"
)

// ControlSubjectPrefix starts every control subject:
// proctor.ctl.<run_id>.<action>. Control messages are plain NATS messages
// (not stored: the run's log holds the RunControl event, and the run index
// the control state), published after the run index is updated, so a
// service that missed one finds the state in the index.
const ControlSubjectPrefix = "proctor.ctl."

// ControlSubject is the control subject of one run and action.
func ControlSubject(runID, action string) string {
	return ControlSubjectPrefix + runID + "." + action
}

// ControlFilter matches every control message of every run.
const ControlFilter = ControlSubjectPrefix + ">"

// ControlRun returns the run id of a control subject ("" when subject is
// not one).
func ControlRun(subject string) string {
	rest, ok := strings.CutPrefix(subject, ControlSubjectPrefix)
	if !ok {
		return ""
	}
	run, _, _ := strings.Cut(rest, ".")
	return run
}

// RunControlData is one control action on a running run: who asked, when
// (the envelope's time), what and why. Every action is one event in the
// run's log, so replay, `runs show`, `watch` and the viewer show it.
type RunControlData struct {
	// Action is ControlCancel, ControlPause, ControlContinue or
	// ControlRequeue.
	Action string `json:"action"`
	// Cells are the cells acted on: for a cancel, the cells cancelled
	// (empty: the whole run); for a requeue, the cells run again.
	Cells []string `json:"cells,omitempty"`
	// Attempts maps each requeued cell to the attempt the requeue
	// replaces (its new attempt is the next one).
	Attempts map[string]int `json:"attempts,omitempty"`
	// By names who asked: "user@host pid N" for a command, "viewer
	// (addr)" for the web UI, "cap" for a spending cap of the run.
	By string `json:"by"`
	// Why is the operator's reason (--why), or the cap's.
	Why string `json:"why,omitempty"`
	// Now, on a pause, freezes the running cells' sandboxes too.
	Now bool `json:"now,omitempty"`
	// Cap names the spending cap that tripped a pause
	// (max_cost_usd, max_errored_fraction, max_errored_per_task).
	Cap string `json:"cap,omitempty"`
}
