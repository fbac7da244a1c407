package view_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/proctor-eval/proctor/internal/view"
	"github.com/proctor-eval/proctor/pkg/bus"
)

// chromium returns the path of a Chromium or Chrome binary. Without one
// the test skips, saying why, except under CI where it fails
// (scripts/setup.sh --browser installs Debian's chromium).
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium binary on PATH (scripts/setup.sh --browser installs it)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browser is one headless Chromium for a test, with the console errors,
// uncaught exceptions and error log entries (failed loads) of its tab.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t testing.TB) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1300, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value))
				}
				b.errors = append(b.errors, "console.error "+strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception "+ev.ExceptionDetails.Text+" "+exceptionText(ev.ExceptionDetails))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				b.errors = append(b.errors, "log "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// consoleErrors returns and clears the errors seen so far.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.errors
	b.errors = nil
	return out
}

// open navigates to u and polls until the JavaScript predicate is truthy
// (30 s at most).
func (b *browser) open(t testing.TB, u, predicate string) {
	t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(u)); err != nil {
		t.Fatalf("navigate %s: %v", u, err)
	}
	b.wait(t, predicate)
}

func (b *browser) wait(t testing.TB, predicate string) {
	t.Helper()
	// The poll's own timeout runs in the page; this bounds the call too,
	// so a page that stops answering fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		text, _ := b.eval(t, `document.body.innerText`)
		t.Fatalf("waiting for %s: %v\npage text:\n%s", predicate, err, text)
	}
}

func (b *browser) eval(t testing.TB, expr string) (string, error) {
	t.Helper()
	return chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
}

func (b *browser) text(t testing.TB, selector string) string {
	t.Helper()
	s, err := b.eval(t, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, selector))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// screenshot saves the page as out/view/<name>.png at the repository's
// root (gitignored), a test artifact to look at.
func (b *browser) screenshot(t testing.TB, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "out", "view")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// noErrors fails the test with the console errors seen on a page.
func (b *browser) noErrors(t testing.TB, page string) {
	t.Helper()
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("%s: console errors:\n%s", page, strings.Join(errs, "\n"))
	}
}

// startNATS starts a real in-process JetStream server on a temporary store.
func startNATS(t testing.TB) (*bus.Embedded, *bus.Bus) {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	b, err := bus.Connect(context.Background(), e.ClientURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return e, b
}

// startView serves a viewer over b on a loopback httptest server.
func startView(t testing.TB, b *bus.Bus, cfg view.Config) *httptest.Server {
	t.Helper()
	return startViewOn(t, view.Fixed(view.Log{Bus: b}), cfg)
}

// startViewOn serves a viewer of src on a loopback httptest server.
func startViewOn(t testing.TB, src view.Source, cfg view.Config) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := view.New(ctx, cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s)
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(func() { cancel(); srv.Close() })
	return srv
}

// getJSON fetches a .json page and decodes it into v; it returns the
// status code.
func getJSON(t testing.TB, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	return resp.StatusCode
}

// cellPath is a cell's page path, each part of the id escaped.
func cellPath(runID, cellID string) string {
	parts := strings.Split(cellID, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/runs/" + runID + "/cells/" + strings.Join(parts, "/")
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d.Exception != nil {
		return d.Exception.Description
	}
	return ""
}
