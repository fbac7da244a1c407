package view_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/view"
)

// handover is a view.Source whose log is not there until the test gives
// it, as the CLI's is while the store changes hands.
type handover struct {
	mu      sync.Mutex
	log     *view.Log
	changed chan struct{}
}

func newHandover() *handover { return &handover{changed: make(chan struct{})} }

func (h *handover) Log(ctx context.Context) (view.Log, error) {
	for {
		h.mu.Lock()
		l, changed := h.log, h.changed
		h.mu.Unlock()
		if l != nil {
			return *l, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return view.Log{}, ctx.Err()
		}
	}
}

func (h *handover) give(l view.Log) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = &l
	close(h.changed)
	h.changed = make(chan struct{})
}

// TestViewPendingWhileTheLogChangesHands: while the viewer has no
// connection to the log, its JSON answers 503 with "pending" (not an
// error) and its pages say "pending"; once the log is there, the page
// renders it without a reload.
func TestViewPendingWhileTheLogChangesHands(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	_, b := startNATS(t)
	runID, _ := publishRun(t, b, 2, 1, t.TempDir(), true)
	h := newHandover()
	srv := startViewOn(t, h, view.Config{Version: "test", PendingWait: 200 * time.Millisecond})
	for _, p := range []string{"/runs.json", "/runs/" + runID + ".json", "/runs/" + runID + "/live"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"pending":"pending: `) {
			t.Errorf("GET %s with no log: %d %s, want 503 pending", p, resp.StatusCode, body)
		}
	}
	br.open(t, srv.URL+"/runs/"+runID, `document.querySelector("#pending") && document.querySelector("#pending").innerText.startsWith("pending:")`)
	if _, err := br.eval(t, `String(window.__sameDocument = "yes")`); err != nil {
		t.Fatal(err)
	}
	h.give(view.Log{Bus: b})
	br.wait(t, `document.querySelectorAll("#grid a.cell").length === 2 && !document.querySelector("#pending")`)
	if same, _ := br.eval(t, `String(window.__sameDocument)`); same != "yes" {
		t.Fatal("the page reloaded")
	}
}
