package view_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proctor-eval/proctor/internal/view"
)

// TestViewRetriesAViewerThatDidNotAnswer: a page whose JSON request got
// no answer (the connection dropped: the viewer restarting, a loaded
// machine) says so and asks again, and renders the run once it answers,
// rather than showing a lasting "Failed to fetch".
func TestViewRetriesAViewerThatDidNotAnswer(t *testing.T) {
	t.Parallel()
	br := newBrowser(t)
	_, b := startNATS(t)
	runID, _ := publishRun(t, b, 2, 1, t.TempDir(), true)
	srv := startView(t, b, view.Config{Version: "test"})
	up, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(up)
	var dropped atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".json") && dropped.Add(1) <= 6 {
			// The first six JSON requests (the browser asks again once by
			// itself): the connection closes unanswered.
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = c.Close()
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	br.open(t, front.URL+"/runs/"+runID, `document.querySelectorAll("#grid a.cell").length === 2`)
	if n := dropped.Load(); n < 7 {
		t.Fatalf("%d JSON requests, want the six dropped and one answered", n)
	}
}
