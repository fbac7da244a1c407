package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// maxDataRunes bounds the data printed on one `watch --events` line.
const maxDataRunes = 200

type watchFlags struct {
	events bool
	types  []string
	cell   string
}

func newWatch(g *globals) *cobra.Command {
	f := &watchFlags{}
	cmd := &cobra.Command{
		Use:   "watch [RUN] [--events] [--type Usage,Command] [--cell GLOB]",
		Short: "Follow a run live from the event log: progress per harness, and a filtered tail of events",
		Long: `Follow RUN (a run id or a unique prefix; default: the newest run of the index)
from the event log. Started mid-run, it catches up from the run's first event,
then follows new ones, and exits when the run's RunFinished event arrives.

Progress is one line per harness, printed when it changes:

  [10:04:05] oracle: 3/8 done, 2 running, 3 queued, 1 errored, pass rate 2/2 = 100.0 %

(done = cells with their terminal event; errored cells are missing data, so
the pass rate is over scored cells, as in the artifact). When the run ends,
one "final" line per harness gives the artifact's summary counts. Events
whose data did not decode are counted on a "warning:" line (the artifact's
run.decode_errors).

--events also prints events, one line each: time (UTC), cell (- for run-level
events), #attempt, type and the event's data as compact JSON (cut at 200
characters). --type keeps only the listed event types; --cell keeps only
cells whose id matches GLOB, where * matches any run of characters
(including /) and ? one character, e.g. 'fix-sum/*' or '*/oracle/*'.

Any NATS client can follow the same subjects (see docs/cluster.md's telemetry
subjects). Without a running proctor on this machine watch opens the store
itself; a run that is not finished then has no process to finish it, and
watch exits with an error after printing what the log holds.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			arg := ""
			if len(args) == 1 {
				arg = args[0]
			}
			return g.watch(cmd.Context(), arg, f)
		},
	}
	cmd.Flags().BoolVar(&f.events, "events", false, "also print events, one line each")
	cmd.Flags().StringSliceVar(&f.types, "type", nil, "with --events: only these event types (comma-separated, e.g. Usage,Command)")
	cmd.Flags().StringVar(&f.cell, "cell", "", "with --events: only cells whose id matches this glob (* matches across /)")
	return cmd
}

// eventFilter decides which events `watch --events` prints.
type eventFilter struct {
	types map[events.Type]bool // nil = every type
	cell  *regexp.Regexp       // nil = every cell
}

func newEventFilter(types []string, cellGlob string) (eventFilter, error) {
	var f eventFilter
	for _, t := range types {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if _, ok := events.DataType(events.Type(t)); !ok {
			var known []string
			for _, k := range events.Types() {
				known = append(known, string(k))
			}
			return f, usageError{fmt.Errorf("--type %s: unknown event type (known: %s)", t, strings.Join(known, ", "))}
		}
		if f.types == nil {
			f.types = map[events.Type]bool{}
		}
		f.types[events.Type(t)] = true
	}
	if cellGlob != "" {
		f.cell = globRegexp(cellGlob)
	}
	return f, nil
}

// globRegexp compiles a glob where * matches any run of characters
// (including /) and ? one character; everything else is literal.
func globRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func (f eventFilter) match(e events.Envelope) bool {
	if f.types != nil && !f.types[e.Type] {
		return false
	}
	if f.cell != nil && !f.cell.MatchString(e.CellID) {
		return false
	}
	return true
}

// eventLine is one event as `watch --events` prints it, shown through
// textsafe.Line: the data holds what the agent wrote (a reason, a tool
// name, a command's output), and JSON escapes neither C1 controls nor
// bidirectional ones.
func eventLine(e events.Envelope) string {
	cell := "-"
	if e.CellID != "" {
		cell = fmt.Sprintf("%s #%d", e.CellID, e.Attempt)
	}
	data := string(e.Data)
	if utf8.RuneCountInString(data) > maxDataRunes {
		r := []rune(data)
		data = string(r[:maxDataRunes]) + "…"
	}
	return textsafe.Line(fmt.Sprintf("%s %s %s %s", e.At.UTC().Format("15:04:05.000"), cell, e.Type, data))
}

// watcher folds one run's events with a projection.Projector and
// prints progress lines when they change.
type watcher struct {
	g      *globals
	runID  string
	flags  *watchFlags
	filter eventFilter
	p      *projection.Projector
	// delivered counts the events handled, so a follow that starts again
	// from the run's first event (after a reconnect) skips them.
	delivered int
	last      time.Time // time of the last event handled
	caughtUp  bool
	lines     map[string]string // last progress line printed per harness
	// decodeShown is the decode error count last printed.
	decodeShown int
}

// errLost is returned by follow when the connection to the server went
// away (the run's process exited or died).
var errLost = errors.New("connection to the event log lost")

func (g *globals) watch(ctx context.Context, arg string, f *watchFlags) error {
	filter, err := newEventFilter(f.types, f.cell)
	if err != nil {
		return err
	}
	conn, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	id, err := g.resolveRun(ctx, conn.Bus, arg)
	if err != nil {
		return err
	}
	if _, err := conn.GetRun(ctx, id); errors.Is(err, bus.ErrNotFound) {
		// Not in the index: watch only a run whose events are in the log.
		if err := g.requireEvents(ctx, conn.Bus, id); err != nil {
			return err
		}
	}
	w := &watcher{g: g, runID: id, flags: f, filter: filter, p: projection.NewProjector(id), lines: map[string]string{}}
	fmt.Fprintf(g.stdout, "watching run %s\n", id)
	for {
		err := w.follow(ctx, conn)
		if !errors.Is(err, errLost) {
			return err
		}
		// The serving process went away. Once its store is free (it removes
		// nats.url when it stops; a killed one leaves a dead URL), read on
		// from the store itself or from whoever serves it now.
		conn.Close()
		conn = nil
		waitGone(ctx, urlFile(g.home), 10*time.Second)
		if conn, err = g.connect(ctx); err != nil {
			return err
		}
	}
}

// waitGone polls until path no longer exists, ctx ends or d passes.
func waitGone(ctx context.Context, path string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a file, not synchronising on time
	}
}

// follow reads the run from its first event until it ends (nil: the
// RunFinished of its newest epoch, projection.Follow), the end of a log
// nobody writes any more (an error), ctx's end, or a lost connection
// (errLost).
func (w *watcher) follow(ctx context.Context, conn *connection) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Only this process can write a store it serves itself: past its
	// last event the run cannot go on.
	owned := conn.embedded != nil
	// Through the nats.url of a local proctor, a lost connection means
	// that process stopped: its server will not come back. (With --nats,
	// nats.go reconnects to the cluster by itself.)
	var lost atomic.Bool
	local := !owned && w.g.natsURL == ""
	if local {
		conn.NC.SetDisconnectErrHandler(func(*nats.Conn, error) { lost.Store(true); cancel() })
		conn.NC.SetClosedHandler(func(*nats.Conn) { lost.Store(true); cancel() })
		defer conn.NC.SetDisconnectErrHandler(nil)
		defer conn.NC.SetClosedHandler(nil)
	}

	// The last event stored now marks the end of the catch-up.
	lastID := ""
	last, err := conn.LastEvent(ctx, events.RunFilter(w.runID))
	switch {
	case err == nil:
		lastID = last.ID
	case errors.Is(err, bus.ErrNotFound):
		w.caughtUp = true
	default:
		return err
	}
	if owned && lastID == "" {
		return fmt.Errorf("run %s: no events in the log of %s", w.runID, w.g.storeName())
	}
	skip := w.delivered
	handle := func(e events.Envelope) error {
		if skip > 0 {
			skip--
			return nil
		}
		w.delivered++
		w.last = e.At
		w.apply(e)
		if e.ID == lastID && !w.caughtUp {
			w.caughtUp = true
			w.progress(e.At)
		}
		return nil
	}
	filters := []string{events.RunFilter(w.runID)}
	if owned {
		// Nobody else writes this store: read what it holds and stop.
		if err := conn.Read(ctx, filters, handle); err != nil {
			if ctx.Err() != nil {
				return ErrInterrupted
			}
			return err
		}
		if w.p.Finished() { // the newest epoch's RunFinished: the run ended
			w.final()
			return nil
		}
		w.caughtUp = true
		w.progress(w.last)
		w.decodeErrors()
		return fmt.Errorf("run %s has not finished and no proctor process serves this store (its process died?); `proctor runs resume %s` continues it; `proctor replay %s` projects what finished", w.runID, w.runID, w.runID)
	}
	// Until the run ends, past the RunFinished of each earlier epoch of a
	// resumed run.
	err = projection.Follow(fctx, conn.Bus, w.runID, projection.FollowOptions{}, handle)
	switch {
	case err == nil:
		w.final()
		return nil
	case err != nil && ctx.Err() == nil && local && (lost.Load() || !conn.NC.IsConnected()):
		return errLost
	case err != nil && ctx.Err() != nil:
		return ErrInterrupted
	}
	return err
}

// apply folds one event, prints it when --events selects it, and prints
// progress when a cell changed state or a run-level event arrived.
func (w *watcher) apply(e events.Envelope) {
	before := ""
	if e.CellID != "" && w.caughtUp {
		before = w.p.CellState(e.CellID)
	}
	w.p.Apply(e)
	if w.flags.events && w.filter.match(e) {
		fmt.Fprintln(w.g.stdout, eventLine(e))
	} else if e.Type == events.RunControl && w.caughtUp {
		fmt.Fprintln(w.g.stdout, controlLine(w.p))
	}
	if !w.caughtUp || w.p.Finished() {
		return
	}
	if e.CellID == "" || w.p.CellState(e.CellID) != before {
		w.progress(e.At)
	}
}

// progress prints the harnesses whose progress line changed, and the
// count of events whose data did not decode when it grew.
func (w *watcher) progress(at time.Time) {
	defer w.decodeErrors()
	for _, h := range w.p.Progress() {
		line := progressText(h)
		if w.lines[h.Harness] == line {
			continue
		}
		w.lines[h.Harness] = line
		fmt.Fprintf(w.g.stdout, "[%s] %s\n", at.UTC().Format("15:04:05"), line)
	}
}

// final prints the run's end: its status and, per harness, the counts of
// the artifact's summary (the Projector's, so they are the same numbers).
func (w *watcher) final() {
	rec := w.p.Record()
	fmt.Fprintf(w.g.stdout, "run %s %s: %d cells: %s\n", w.runID, rec.Status, len(w.p.Cells()), countsText(rec.Counts))
	hs := w.p.Progress()
	slices.SortFunc(hs, func(a, b projection.HarnessProgress) int { return strings.Compare(a.Harness, b.Harness) })
	for _, h := range hs {
		rate := "—"
		if h.PassRate != nil {
			rate = fmt.Sprintf("%.6f", *h.PassRate)
		}
		fmt.Fprintf(w.g.stdout, "final %s: n %d, errored %d, scored %d, passed %d, pass_rate %s\n",
			textsafe.Line(h.Harness), h.Cells, h.Errored, h.Scored, h.Passed, rate)
	}
	w.decodeErrors()
}

// decodeErrors prints the events whose data did not decode so far, once
// per new count: the artifact lists them as run.decode_errors.
func (w *watcher) decodeErrors() {
	d := w.p.DecodeErrors()
	if d == nil || d.Count == w.decodeShown {
		return
	}
	w.decodeShown = d.Count
	fmt.Fprintf(w.g.stdout, "warning: %s\n", decodeErrorsText(d))
}
