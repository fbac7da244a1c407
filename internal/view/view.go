// Package view is `proctor view`: a web UI over the event log, read-only
// but for a run's control actions (cancel, pause, continue) when allowed.
// Every page is one HTML shell (assets embedded in the binary, nothing
// fetched at run time) whose script fetches the JSON behind the page at
// the same path with ".json" appended, and, on a run's page, follows its
// progress over Server-Sent Events fed by a JetStream consumer on the
// run's subjects. Outcomes come from pkg/projection, the same
// code that writes the artifact, so the viewer never re-derives them.
//
// Routes (all GET but the control action; any other method is 405):
//
//	/                          redirect to /runs
//	/runs, /runs.json          the run index, newest first (?status=, ?harness=, ?page=)
//	/runs/RUN, /runs/RUN.json  one run: progress, summary, comparisons, grid (?page=)
//	/runs/RUN/live             text/event-stream of progress and changed cells
//	/runs/RUN/figures/NAME     one of the run's SVG figures
//	/runs/RUN/cells/CELL[.json] one cell (?events=, ?transcript= pages)
//	/runs/RUN/file?cell=CELL&name=PATH  a file of the cell's output directory, as text
//	POST /runs/RUN/control     cancel, pause or continue the run (ControlRequest; Config.Control)
//	/assets/...                the embedded HTML, script and style
package view

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
)

//go:embed assets
var assets embed.FS

// PageSize is the number of items per page of every paged list: runs,
// tasks of a run's grid, a cell's events and its transcript.
const PageSize = 100

// Config configures a Server. The zero value is usable.
type Config struct {
	// Version is the proctor version, written as run.proctor_version when
	// the log lacks one (as replay does).
	Version string
	// Token, when set, is required on every request: as ?token= (which
	// also sets a cookie for the pages' own requests), as that cookie, or
	// as "Authorization: Bearer TOKEN".
	Token string
	// Control allows the control actions of a run's page (POST
	// /runs/RUN/control: cancel, pause, continue). The CLI allows them
	// with a token, or on a loopback address.
	Control bool
	Logger  *slog.Logger
	// PendingWait bounds how long a request waits for what is not
	// available yet (the log changing hands, a run's events still being
	// read) before it is answered "pending" (503), which the pages ask
	// again for; 0 means 10 s.
	PendingWait time.Duration
}

// Source gives the viewer its way to the event log. The viewer asks for
// it on every request and every follow: a source may change hands (the
// CLI's reads through a running proctor's server while one runs, and
// serves the store itself between runs). Safe for concurrent use.
type Source interface {
	// Log returns the connection to use now, waiting while the log
	// changes hands, until ctx ends (ctx's error).
	Log(ctx context.Context) (Log, error)
}

// Log is one connection to the event log.
type Log struct {
	Bus *bus.Bus
	// Owned is true when this process serves the store itself, since
	// Since: a run that has not finished and whose last event is older
	// than Since has no process left to finish it, and is shown stale.
	Owned bool
	Since time.Time
	// Lost is closed when the connection is gone (the process serving it
	// exited, or this one handed the store over); nil when it never is.
	Lost <-chan struct{}
}

// Fixed is a Source that always gives l.
func Fixed(l Log) Source { return fixed(l) }

type fixed Log

func (f fixed) Log(context.Context) (Log, error) { return Log(f), nil }

// defaultPendingWait is Config.PendingWait's default.
const defaultPendingWait = 10 * time.Second

// errPending answers a request for what is not available yet.
var errPending = httpError{http.StatusServiceUnavailable, "pending: the event log is changing hands (a run started or ended) or still being read; this page asks again"}

// settle turns err, of a request that used l, into errPending when l was
// lost meanwhile (the process serving it exited, or the store was handed
// over): the page asks again and gets the next connection.
func settle(l Log, err error) error {
	if err == nil || l.Bus == nil {
		return err
	}
	lost := l.Bus.NC.IsClosed() || !l.Bus.NC.IsConnected()
	if l.Lost != nil {
		select {
		case <-l.Lost:
			lost = true
		default:
		}
	}
	if lost {
		return errPending
	}
	return err
}

// log returns the connection a request uses, or errPending when none
// comes within Config.PendingWait.
func (s *Server) log(ctx context.Context) (Log, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.PendingWait)
	defer cancel()
	l, err := s.src.Log(wctx)
	if err != nil && ctx.Err() == nil {
		return l, errPending
	}
	return l, err
}

// Server serves the viewer. Safe for concurrent use.
type Server struct {
	cfg   Config
	src   Source
	logr  *slog.Logger
	lives *lives
	mux   *http.ServeMux
}

// New returns a viewer reading the log src gives. Projections of the
// runs pages ask for are followed until ctx ends.
func New(ctx context.Context, cfg Config, src Source) (*Server, error) {
	if src == nil {
		return nil, errors.New("view: nil source")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PendingWait <= 0 {
		cfg.PendingWait = defaultPendingWait
	}
	s := &Server{cfg: cfg, src: src, logr: cfg.Logger.With("service", "view"),
		lives: &lives{ctx: ctx, src: src, wait: cfg.PendingWait, version: cfg.Version, runs: map[string]*live{}}}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/runs", http.StatusFound) })
	m.HandleFunc("GET /runs", s.page)
	m.HandleFunc("GET /runs.json", s.runsJSON)
	m.HandleFunc("GET /runs/{run}", s.runRoute)
	m.HandleFunc("GET /runs/{run}/live", s.liveStream)
	m.HandleFunc("GET /runs/{run}/figures/{name}", s.figure)
	m.HandleFunc("GET /runs/{run}/cells/{cell...}", s.cellRoute)
	m.HandleFunc("GET /runs/{run}/file", s.file)
	m.HandleFunc("POST /runs/{run}/control", s.control)
	s.mux = m
	return s, nil
}

// ServeHTTP checks the method and the token, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !(r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/control")) {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET only, but for POST /runs/RUN/control", http.StatusMethodNotAllowed)
		return
	}
	if s.cfg.Token != "" && !s.authorized(w, r) {
		http.Error(w, "a token is required: open the URL with ?token=TOKEN", http.StatusUnauthorized)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

const tokenCookie = "proctor_view_token"

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	eq := func(got string) bool { return subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1 }
	if t := r.URL.Query().Get("token"); t != "" && eq(t) {
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		return true
	}
	if c, err := r.Cookie(tokenCookie); err == nil && eq(c.Value) {
		return true
	}
	return eq(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
}

// page serves the HTML shell; its script renders the page from the JSON
// at the same path with ".json".
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	data, err := assets.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(data)
}

func (s *Server) runRoute(w http.ResponseWriter, r *http.Request) {
	id, isJSON := strings.CutSuffix(r.PathValue("run"), ".json")
	if !isJSON {
		s.page(w, r)
		return
	}
	s.runJSON(w, r, id)
}

func (s *Server) cellRoute(w http.ResponseWriter, r *http.Request) {
	cell, isJSON := strings.CutSuffix(r.PathValue("cell"), ".json")
	if !isJSON {
		s.page(w, r)
		return
	}
	s.cellJSON(w, r, r.PathValue("run"), cell)
}

// httpError is an error with the HTTP status to answer it with.
type httpError struct {
	status int
	msg    string
}

func (e httpError) Error() string { return e.msg }

func writeJSON(w http.ResponseWriter, v any, err error) {
	if err != nil {
		status := http.StatusInternalServerError
		var he httpError
		if errors.As(err, &he) {
			status = he.status
		}
		w.Header().Set("Content-Type", "application/json")
		key := "error"
		if status == http.StatusServiceUnavailable {
			key = "pending" // not an error: the page asks again
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{key: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

// Paging is one page of a list: 1-based Page of Pages, Total items.
type Paging struct {
	Page  int `json:"page"`
	Pages int `json:"pages"`
	Total int `json:"total"`
}

// pageOf reads query key q as a 1-based page number (clamped to the
// pages of total items) and returns the paging and the [lo, hi) slice.
func pageOf(r *http.Request, q string, total int) (Paging, int, int) {
	pages := max(1, (total+PageSize-1)/PageSize)
	n, err := strconv.Atoi(r.URL.Query().Get(q))
	if err != nil || n < 1 {
		n = 1
	}
	n = min(n, pages)
	lo := (n - 1) * PageSize
	return Paging{Page: n, Pages: pages, Total: total}, min(lo, total), min(lo+PageSize, total)
}
