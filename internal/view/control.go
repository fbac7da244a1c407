package view

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// ControlHeader must be set on a control request (any value): a page of
// another site cannot send it without a CORS preflight, which the viewer
// never answers, so a control action cannot be forged from another
// origin, token or not.
const ControlHeader = "X-Proctor-Control"

// ControlRequest is the JSON body of POST /runs/RUN/control.
type ControlRequest struct {
	// Action is cancel, pause or continue.
	Action string `json:"action"`
	// Cells, for a cancel, are the cells to cancel (none: the run).
	Cells []string `json:"cells,omitempty"`
	Why   string   `json:"why,omitempty"`
	// Now, for a pause, freezes the running cells' sandboxes too.
	Now bool `json:"now,omitempty"`
}

// control records a control action on a live run, as `proctor runs
// cancel|pause|continue` do (bus.Control: the run index, the run's log,
// the control subject), by "viewer (REMOTE-ADDR)". It is refused (403)
// unless the viewer was started with control allowed (Config.Control:
// a token, or a loopback address), and without ControlHeader.
func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Control {
		writeJSON(w, nil, httpError{http.StatusForbidden, "control actions need `proctor view --token T` on an address other than loopback"})
		return
	}
	if r.Header.Get(ControlHeader) == "" {
		writeJSON(w, nil, httpError{http.StatusForbidden, "a control request needs the " + ControlHeader + " header"})
		return
	}
	var req ControlRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeJSON(w, nil, httpError{http.StatusBadRequest, "control request: " + err.Error()})
		return
	}
	switch req.Action {
	case events.ControlCancel, events.ControlPause, events.ControlContinue:
	default:
		writeJSON(w, nil, httpError{http.StatusBadRequest, fmt.Sprintf("control request: action %q is not cancel, pause or continue", req.Action)})
		return
	}
	ctx := r.Context()
	lg, err := s.log(ctx)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	id := r.PathValue("run")
	rec, err := lg.Bus.GetRun(ctx, id)
	if err != nil {
		writeJSON(w, nil, httpError{http.StatusNotFound, err.Error()})
		return
	}
	switch {
	case rec.Terminal():
		writeJSON(w, nil, httpError{http.StatusConflict, fmt.Sprintf("run %s has ended (%s)", id, rec.Status)})
		return
	case rec.LeaseExpired(time.Now()):
		writeJSON(w, nil, httpError{http.StatusConflict, fmt.Sprintf("run %s has no live owner: `proctor runs resume %s` continues it", id, id)})
		return
	case req.Action == events.ControlContinue && !rec.Control.Paused:
		writeJSON(w, nil, httpError{http.StatusConflict, fmt.Sprintf("run %s is not paused", id)})
		return
	}
	if req.Action == events.ControlCancel && len(req.Cells) > 0 {
		l, err := s.lives.get(ctx, id, rec.Epoch)
		if err != nil {
			writeJSON(w, nil, settle(lg, err))
			return
		}
		l.mu.Lock()
		cells := l.p.Cells()
		l.mu.Unlock()
		for _, c := range req.Cells {
			if !slices.Contains(cells, c) {
				writeJSON(w, nil, httpError{http.StatusBadRequest, fmt.Sprintf("run %s has no cell %q", id, c)})
				return
			}
		}
	}
	if req.Action != events.ControlCancel {
		req.Cells = nil
	}
	d := events.RunControlData{Action: req.Action, Cells: req.Cells, Why: req.Why, Now: req.Now && req.Action == events.ControlPause,
		By: "viewer (" + r.RemoteAddr + ")"}
	e, err := lg.Bus.Control(ctx, id, "view", d)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	s.logr.Info("control", "run", id, "action", d.Action, "by", d.By, "why", d.Why)
	writeJSON(w, map[string]any{"event": e.ID, "at": e.At, "action": d.Action, "by": d.By}, nil)
}

// ControlView is what a run page shows of the run's control: its state
// and its actions, one line each.
type ControlView struct {
	State   bus.ControlState `json:"state"`
	Actions []string         `json:"actions,omitempty"`
	// Allowed says whether this viewer takes control actions.
	Allowed bool `json:"allowed"`
}
