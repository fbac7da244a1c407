package view_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/view"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// postControl posts a control request; it returns the status code.
func postControl(t *testing.T, url, body string, header bool) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if header {
		req.Header.Set(view.ControlHeader, "1")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestViewControl: a run page's control actions pause, continue and
// cancel a live run as `proctor runs` does (the run index's state, a
// RunControl event by "viewer (...)"); they are refused (403) by a viewer
// not allowed to control (no --token beyond loopback) and without the
// control header (a form another site could post), and a continue of a
// run not paused is a conflict (409). The run page shows the state.
func TestViewControl(t *testing.T) {
	t.Parallel()
	_, b := startNATS(t)
	ctx := context.Background()
	runID, _ := publishRun(t, b, 2, 1, filepath.Join(t.TempDir(), "out"), false)
	if err := b.PutRun(ctx, bus.RunRecord{ID: runID, Status: bus.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	refuse := startView(t, b, view.Config{Version: "test"})
	if got := postControl(t, refuse.URL+"/runs/"+runID+"/control", `{"action":"pause"}`, true); got != http.StatusForbidden {
		t.Errorf("control on a viewer without control: %d, want 403", got)
	}
	srv := startView(t, b, view.Config{Version: "test", Control: true})
	u := srv.URL + "/runs/" + runID + "/control"
	for _, c := range []struct {
		body   string
		header bool
		want   int
	}{
		{`{"action":"pause","why":"look"}`, false, http.StatusForbidden},
		{`{"action":"continue"}`, true, http.StatusConflict},
		{`{"action":"requeue"}`, true, http.StatusBadRequest},
		{`{"action":"pause","why":"look"}`, true, http.StatusOK},
		{`{"action":"cancel","cells":["nope"]}`, true, http.StatusBadRequest},
		{`{"action":"continue","why":"ok"}`, true, http.StatusOK},
		{`{"action":"cancel","why":"done"}`, true, http.StatusOK},
	} {
		if got := postControl(t, u, c.body, c.header); got != c.want {
			t.Errorf("POST %s (header %v): %d, want %d", c.body, c.header, got, c.want)
		}
	}
	rec, err := b.GetRun(ctx, runID)
	if err != nil || !rec.Control.Cancelled || rec.Control.Paused {
		t.Fatalf("record control %+v (%v), want cancelled, not paused", rec.Control, err)
	}
	var got []string
	if err := b.ReadRun(ctx, runID, func(e events.Envelope) error {
		if e.Type == events.RunControl {
			var d events.RunControlData
			_ = events.Into(e, &d)
			if !strings.HasPrefix(d.By, "viewer (127.0.0.1:") {
				t.Errorf("by %q", d.By)
			}
			got = append(got, d.Action+": "+d.Why)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := "pause: look,continue: ok,cancel: done"; strings.Join(got, ",") != want {
		t.Errorf("control events %q, want %q", got, want)
	}
	var page view.RunPage
	deadline := time.Now().Add(30 * time.Second)
	for getJSON(t, srv.URL+"/runs/"+runID+".json", &page); len(page.Control.Actions) < 3 && time.Now().Before(deadline); getJSON(t, srv.URL+"/runs/"+runID+".json", &page) {
		time.Sleep(50 * time.Millisecond) // polling the page while its projection follows the log
	}
	if !page.Control.Allowed || !page.Control.State.Cancelled || len(page.Control.Actions) != 3 {
		t.Errorf("page control %+v", page.Control)
	}
}

// TestViewControlButtons drives the run page's buttons in headless
// Chromium: Pause (its reason asked and recorded) shows the run paused
// with a Continue button; Continue lifts it; Cancel run cancels it. Each
// click is one RunControl event by the viewer.
func TestViewControlButtons(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	_, b := startNATS(t)
	ctx := context.Background()
	runID, _ := publishRun(t, b, 2, 1, filepath.Join(t.TempDir(), "out"), false)
	if err := b.PutRun(ctx, bus.RunRecord{ID: runID, Status: bus.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	srv := startView(t, b, view.Config{Version: "test", Control: true})
	br.open(t, srv.URL+"/runs/"+runID, `document.querySelector("#btn-pause") !== null`)
	if _, err := br.eval(t, `window.prompt = () => "from the page"; "ok"`); err != nil {
		t.Fatal(err)
	}
	if _, err := br.eval(t, `document.querySelector("#btn-pause").click(); "ok"`); err != nil {
		t.Fatal(err)
	}
	br.wait(t, `document.querySelector("#run-paused") !== null && document.querySelector("#btn-continue") !== null`)
	if got := br.text(t, "#run-paused"); !strings.Contains(got, "from the page") || !strings.Contains(got, "viewer (") {
		t.Errorf("paused line %q", got)
	}
	br.screenshot(t, "run-paused")
	if _, err := br.eval(t, `window.prompt = () => "resume"; document.querySelector("#btn-continue").click(); "ok"`); err != nil {
		t.Fatal(err)
	}
	br.wait(t, `document.querySelector("#run-paused") === null && document.querySelector("#btn-pause") !== null`)
	if _, err := br.eval(t, `window.prompt = () => "stop"; document.querySelector("#btn-cancel").click(); "ok"`); err != nil {
		t.Fatal(err)
	}
	poll := time.Now().Add(30 * time.Second)
	for {
		rec, err := b.GetRun(ctx, runID)
		if err == nil && rec.Control.Cancelled {
			break
		}
		if time.Now().After(poll) {
			t.Fatalf("run not cancelled: %+v %v", rec.Control, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the run index
	}
	br.noErrors(t, "run page")
}

// TestViewRunsListShowsPaused: in headless Chromium the runs list marks a
// paused run that has not ended with a paused badge beside "running" (as
// `proctor runs list` prints "running (paused)"), and no other run.
func TestViewRunsListShowsPaused(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	_, b := startNATS(t)
	ctx := context.Background()
	pausedID, _ := publishRun(t, b, 1, 1, filepath.Join(t.TempDir(), "out"), false)
	liveID, _ := publishRun(t, b, 1, 1, filepath.Join(t.TempDir(), "out"), false)
	for _, rec := range []bus.RunRecord{
		{ID: pausedID, Status: bus.StatusRunning, Control: bus.ControlState{Paused: true, PausedBy: "ops"}},
		{ID: liveID, Status: bus.StatusRunning},
	} {
		if err := b.PutRun(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	srv := startView(t, b, view.Config{Version: "test"})
	br.open(t, srv.URL+"/runs", `document.querySelectorAll("#runs tr[data-run]").length === 2`)
	for id, want := range map[string]string{pausedID: "running paused", liveID: "running"} {
		got, err := br.eval(t, `document.querySelector("#runs tr[data-run='`+id+`'] td:nth-child(2)").textContent`)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got) != want {
			t.Errorf("run %s: status cell %q, want %q", id, got, want)
		}
	}
	br.noErrors(t, "runs list")
}
