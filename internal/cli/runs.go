package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/atomicfile"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// outcomeOrder is the order outcomes and live states are listed in.
var outcomeOrder = []string{"passed", "partial", "failed", "solver_timeout", "verifier_timeout",
	"verifier_error", "errored", projection.StateRunning, projection.StateQueued}

func newRuns(g *globals) *cobra.Command {
	runs := &cobra.Command{Use: "runs", Short: "List and inspect runs of the run index"}
	runs.AddCommand(newRunsList(g), newRunsShow(g), newRunsResume(g), newRunsCancel(g), newRunsPause(g), newRunsContinue(g), newRunsRequeue(g), newRunsFetch(g))
	return runs
}

// runView is a run index record as `runs list` and `runs show` print it,
// with live state from the log for a run that has not ended.
type runView struct {
	bus.RunRecord
	// Stale is true when the record says requested or running but no
	// proctor process serves this store, or the run's lease expired (on a
	// cluster: its owner stopped renewing it): the process that ran it
	// died, and only `runs resume` continues it.
	Stale bool `json:"stale,omitempty"`
	// LeaseExpired is true when the run has not ended and its lease ended
	// before now (RunRecord.LeaseExpired).
	LeaseExpired bool `json:"lease_expired,omitempty"`
	// States counts cells by outcome, running or queued, from the log.
	States map[string]int `json:"states,omitempty"`
	// Progress is the per-harness progress from the log (runs show only).
	Progress []projection.HarnessProgress `json:"progress,omitempty"`
	// CellStates maps each planned cell to its state (runs show --cells).
	CellStates map[string]string `json:"cell_states,omitempty"`
	// CellErrors maps each errored cell to why it has no verdict: its
	// error class and error, as its row holds them (runs show --cells).
	CellErrors map[string]string `json:"cell_errors,omitempty"`
	// ControlLog lists the run's control actions, one line each (runs
	// show only).
	ControlLog []string `json:"control_log,omitempty"`
	// DecodeErrors counts the run's events whose data did not decode, as
	// the artifact's run.decode_errors (runs show only; nil when none).
	DecodeErrors *artifact.DecodeErrors `json:"decode_errors,omitempty"`
}

func terminalStatus(s string) bool {
	return bus.TerminalStatus(s)
}

func newRunsList(g *globals) *cobra.Command {
	var asJSON, wide bool
	cmd := &cobra.Command{
		Use:   "list [--wide] [--json]",
		Short: "List the runs of the run index, newest first",
		Long: `List every run of the run index (KV bucket PROCTOR_RUNS), newest first,
in a table that fits 100 columns: the run id cut to the shortest unique
prefix of at least 10 characters (every command taking RUN accepts it),
status, start time (UTC), the arms (a path cut to its last element, the
list cut with "…"), then cell counts: CELLS in all, PASS, FAIL (partial,
failed, solver_timeout, verifier_timeout), NONE (no verdict:
verifier_error, errored) and LEFT (running and queued). Counts of a
finished run are the index's; those of a run still going are projected
from its events. "running*" marks a run whose process died: no proctor
serves this store any more; "running (paused)" a paused run (no new cell
starts until "proctor runs continue"). A status wider than 9 characters
takes its excess from ARMS. --wide prints every field in full: id,
status, start and finish times, harnesses, cells, counts by state, the
artifact's path. --json prints the records as a JSON array instead, each
with the index's status ("running") and, for a paused run,
"control": {"paused": true, ...}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			conn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			recs, err := conn.ListRuns(ctx)
			if err != nil {
				return err
			}
			views := make([]runView, 0, len(recs))
			for _, r := range recs {
				v, err := g.view(ctx, conn, r, false, false)
				if err != nil {
					return err
				}
				views = append(views, v)
			}
			if asJSON {
				return writeJSON(g.stdout, views)
			}
			if wide {
				return writeRunsWide(g.stdout, views)
			}
			return writeRunsNarrow(g.stdout, views)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().BoolVar(&wide, "wide", false, "print every field in full (ids, finish time, harnesses, counts by state, artifact)")
	return cmd
}

// writeRunsWide is `runs list --wide`: every field in full, one run a line.
func writeRunsWide(w io.Writer, views []runView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tSTARTED\tFINISHED\tHARNESSES\tCELLS\tSTATES\tARTIFACT")
	for _, v := range views {
		fmt.Fprintln(tw, textsafe.Line(fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s", v.ID, statusText(v), shortTime(v.StartedAt), shortTime(v.FinishedAt),
			strings.Join(v.Spec.Harnesses, ","), v.Cells, countsText(v.States), orDash(v.Artifact))))
	}
	return tw.Flush()
}

// armsWidth is the most runes the ARMS column of `runs list` takes; with
// the other columns at their usual widths and no status wider than
// statusWidth a line stays within 100. A wider status ("interrupted",
// "running (paused)") takes its excess from ARMS.
const (
	armsWidth   = 28
	statusWidth = len("requested")
)

// writeRunsNarrow is `runs list`: short ids, the arms abbreviated, the
// counts grouped by what they mean for a pass rate.
func writeRunsNarrow(w io.Writer, views []runView) error {
	ids := make([]string, len(views))
	for i, v := range views {
		ids[i] = v.ID
	}
	short := shortIDs(ids, 10)
	arms := armsWidth
	for _, v := range views {
		arms = max(min(arms, armsWidth-(utf8.RuneCountInString(statusText(v))-statusWidth)), 10)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tSTARTED\tARMS\tCELLS\tPASS\tFAIL\tNONE\tLEFT")
	for i, v := range views {
		var pass, fail, none, left int
		for k, n := range v.States {
			switch k {
			case "passed":
				pass += n
			case "partial", "failed", "solver_timeout", "verifier_timeout":
				fail += n
			case projection.StateRunning, projection.StateQueued:
				left += n
			default:
				none += n
			}
		}
		started := "-"
		if t, err := time.Parse(time.RFC3339Nano, v.StartedAt); err == nil {
			started = t.UTC().Format("2006-01-02 15:04")
		}
		fmt.Fprintln(tw, textsafe.Line(fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d", short[i], statusText(v), started,
			armsText(v.Spec.Harnesses, arms), v.Cells, pass, fail, none, left)))
	}
	return tw.Flush()
}

// shortIDs returns each id cut to its shortest prefix of at least minLen
// bytes that is no other id's prefix, so `runs show PREFIX` finds it.
func shortIDs(ids []string, minLen int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		n := minLen
		for n < len(id) && slices.ContainsFunc(ids, func(o string) bool { return o != id && strings.HasPrefix(o, id[:n]) }) {
			n++
		}
		out[i] = id[:min(n, len(id))]
	}
	return out
}

// armsText joins the harnesses with ",", each arm whose argument is a path
// (agent:examples/agents/scripted) cut to the path's last element
// (agent:scripted), and cuts the whole to width runes ending in "…".
func armsText(harnesses []string, width int) string {
	names := make([]string, len(harnesses))
	for i, h := range harnesses {
		kind, arg, ok := strings.Cut(h, ":")
		if ok && strings.Contains(arg, "/") && !strings.ContainsAny(arg, " \t") {
			h = kind + ":" + filepath.Base(arg)
		}
		names[i] = h
	}
	s := orDash(strings.Join(names, ","))
	if r := []rune(s); len(r) > width {
		s = string(r[:width-1]) + "…"
	}
	return s
}

func newRunsShow(g *globals) *cobra.Command {
	var asJSON, cells bool
	cmd := &cobra.Command{
		Use:   "show RUN [--json] [--cells]",
		Short: "Show one run: status, spec, times, cell counts by state, progress per harness, artifact paths",
		Long: `Show one run of the run index. RUN is a run id or a unique prefix of one.
The record's fields are printed one per line, followed by the per-harness
progress projected from the run's events (done, running, queued, errored,
passed, pass rate over scored cells). A run with events but no index record
shows the record its events imply. --cells adds every cell with its
state; --json prints the same as one indented JSON object (the record's
fields plus "stale", "states", "progress", "decode_errors" when some
event's data did not decode, and, with --cells, "cell_states").
Events whose data did not decode are counted on a "warning" line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			conn, id, err := g.connectRun(ctx, args[0])
			if err != nil {
				return err
			}
			defer conn.Close()
			rec, err := conn.GetRun(ctx, id)
			if errors.Is(err, bus.ErrNotFound) {
				// Events without an index record (published by another
				// tool): the record the log implies.
				if err := g.requireEvents(ctx, conn.Bus, id); err != nil {
					return err
				}
				p, err := projection.Project(ctx, conn.Bus, id)
				if err != nil {
					return err
				}
				rec = p.Record()
			} else if err != nil {
				return err
			}
			v, err := g.view(ctx, conn, rec, true, cells)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, v)
			}
			writeRunView(g.stdout, v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one indented JSON object")
	cmd.Flags().BoolVar(&cells, "cells", false, "list every cell with its state")
	return cmd
}

// view builds a runView. The log is projected for runs show (detail) and
// for any run that has not ended; a finished run in a list keeps the
// index's counts.
func (g *globals) view(ctx context.Context, conn *connection, r bus.RunRecord, detail, cells bool) (runView, error) {
	v := runView{RunRecord: r, States: r.Counts}
	done := terminalStatus(r.Status)
	v.LeaseExpired = !done && r.LeaseExpired(time.Now())
	v.Stale = !done && (conn.embedded != nil || v.LeaseExpired)
	if done && !detail {
		return v, nil
	}
	p, err := projection.Project(ctx, conn.Bus, r.ID)
	if err != nil {
		return v, err
	}
	v.States = p.States()
	if !detail {
		return v, nil
	}
	v.Progress = p.Progress()
	v.DecodeErrors = p.DecodeErrors()
	for _, c := range p.Controls() {
		v.ControlLog = append(v.ControlLog, c.String())
	}
	if cells {
		v.CellStates = map[string]string{}
		for _, id := range p.Cells() {
			v.CellStates[id] = p.CellState(id)
			if r, ok := p.Row(id); ok && r.Errored() && (r.ErrorClass != "" || r.Error != "") {
				if v.CellErrors == nil {
					v.CellErrors = map[string]string{}
				}
				v.CellErrors[id] = "(" + orDash(r.ErrorClass) + "): " + r.Error
			}
		}
	}
	return v, nil
}

// writeRunView writes `runs show`: one "key value" line per field, every
// value shown through textsafe.Line (an error, a tasks root, a cell id can
// hold what an agent or a task wrote).
func writeRunView(w io.Writer, v runView) {
	line := func(k, val string) {
		if val != "" {
			fmt.Fprintf(w, "%-10s %s\n", k, textsafe.Line(val))
		}
	}
	line("run", v.ID)
	line("status", statusText(v)) // a pause: the paused line below says by whom and why
	line("started", v.StartedAt)
	line("finished", v.FinishedAt)
	tasks := "all"
	if !v.Spec.All {
		tasks = strings.Join(v.Spec.Tasks, ", ")
	}
	line("tasks", v.Spec.TasksRoot+" ("+tasks+")")
	line("harnesses", strings.Join(v.Spec.Harnesses, ", "))
	line("models", strings.Join(v.Spec.Models, ", "))
	line("repeats", fmt.Sprint(v.Spec.Repeats))
	if v.Spec.BaselineHarness != "" {
		line("baseline", v.Spec.BaselineHarness)
	}
	line("cells", fmt.Sprintf("%d: %s", v.Cells, countsText(v.States)))
	line("output", v.Spec.OutputDir)
	line("artifact", v.Artifact)
	line("report", v.Report)
	line("error", v.Error)
	if v.DecodeErrors != nil {
		line("warning", decodeErrorsText(v.DecodeErrors))
	}
	switch {
	case v.LeaseExpired:
		fmt.Fprintf(w, "note       the run's lease ended at %s (its owner %s stopped renewing it): `proctor runs resume %s` continues it; `proctor replay %s` projects what finished\n", v.LeaseUntil, textsafe.Line(orDash(v.Owner)), v.ID, v.ID)
	case v.Stale:
		fmt.Fprintf(w, "note       no proctor process serves this store: the run's process died; `proctor runs resume %s` continues it; `proctor replay %s` projects what finished\n", v.ID, v.ID)
	case v.Status == bus.StatusInterrupted:
		fmt.Fprintf(w, "note       %s\n", resumeHint(v.ID))
	}
	if c := v.Control; c.Paused {
		why := "by " + c.PausedBy
		if c.PausedCap != "" {
			why += " (cap " + c.PausedCap + ")"
		}
		if c.PausedWhy != "" {
			why += ": " + c.PausedWhy
		}
		if terminalStatus(v.Status) {
			// Nothing is left to continue or cancel.
			line("paused", why+"; the run ended "+v.Status+" while paused")
		} else {
			line("paused", why+"; `proctor runs continue "+v.ID+"` or `proctor runs cancel "+v.ID+"`")
		}
	}
	for _, c := range v.ControlLog {
		line("control", c)
	}
	for _, h := range v.Progress {
		line("harness", progressText(h))
	}
	for _, id := range slices.Sorted(maps.Keys(v.CellStates)) {
		state := id + " " + v.CellStates[id]
		if e := v.CellErrors[id]; e != "" {
			state += " " + e
		}
		line("cell", state)
	}
}

// progressText is one harness's progress on one line, the harness name
// shown through textsafe.Line.
func progressText(h projection.HarnessProgress) string {
	rate := "pass rate —"
	if h.PassRate != nil {
		rate = fmt.Sprintf("pass rate %d/%d = %.1f %%", h.Passed, h.Scored, 100**h.PassRate)
	}
	return fmt.Sprintf("%s: %d/%d done, %d running, %d queued, %d errored, %s",
		textsafe.Line(h.Harness), h.Done, h.Cells, h.Running, h.Queued, h.Errored, rate)
}

// statusText is the run's status as `runs list` and `runs show` print
// it: the index's status, "*" after it when the run is stale (its process
// died), and " (paused)" when the run has not finished and is paused (no
// new cell starts): "running (paused)", "running* (paused)". The JSON
// keeps the index's status; the pause is its control.paused.
func statusText(v runView) string {
	s := v.Status
	if v.Stale {
		s += "*"
	}
	if v.Control.Paused && v.FinishedAt == "" && !terminalStatus(v.Status) {
		s += " (paused)"
	}
	return s
}

// countsText lists counts in outcomeOrder, then any other key sorted:
// "5 passed, 1 verifier_timeout, 2 errored".
func countsText(m map[string]int) string {
	var parts []string
	for _, k := range outcomeOrder {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(outcomeOrder, k) && m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func shortTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return orDash(s)
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// resolveRun turns a command-line RUN into a run id: "" is the newest run
// of the index; an id of the index is itself; otherwise a unique prefix
// of an indexed id. An id absent from the index is returned as given, so
// commands that read the log (replay, events export) work on a log whose
// index entry is missing.
func (g *globals) resolveRun(ctx context.Context, b *bus.Bus, arg string) (string, error) {
	if arg != "" {
		if _, err := b.GetRun(ctx, arg); err == nil {
			return arg, nil
		} else if !errors.Is(err, bus.ErrNotFound) {
			return "", err
		}
	}
	recs, err := b.ListRuns(ctx)
	if err != nil {
		return "", err
	}
	if arg == "" {
		if len(recs) == 0 {
			return "", fmt.Errorf("no runs in the run index of %s", g.storeName())
		}
		return recs[0].ID, nil
	}
	var match []string
	for _, r := range recs {
		if strings.HasPrefix(r.ID, strings.ToUpper(arg)) {
			match = append(match, r.ID)
		}
	}
	switch len(match) {
	case 0:
		return arg, nil
	case 1:
		return match[0], nil
	}
	return "", usageError{fmt.Errorf("run prefix %q matches %d runs: %s", arg, len(match), strings.Join(match, ", "))}
}

// connectRun connects to the log and resolves arg to a run id
// (resolveRun): the preamble of the commands that act on one run. The
// caller closes the connection; on an error it is closed already.
func (g *globals) connectRun(ctx context.Context, arg string) (*connection, string, error) {
	conn, err := g.connect(ctx)
	if err != nil {
		return nil, "", err
	}
	id, err := g.resolveRun(ctx, conn.Bus, arg)
	if err != nil {
		conn.Close()
		return nil, "", err
	}
	return conn, id, nil
}

// openRun is connectRun for a run whose events are in the log (replay,
// events export, dataset export --run). The caller closes the
// connection.
func (g *globals) openRun(ctx context.Context, arg string) (*connection, string, error) {
	conn, id, err := g.connectRun(ctx, arg)
	if err != nil {
		return nil, "", err
	}
	if err := g.requireEvents(ctx, conn.Bus, id); err != nil {
		conn.Close()
		return nil, "", err
	}
	return conn, id, nil
}

// requireEvents returns an error when the log holds no event of the run.
func (g *globals) requireEvents(ctx context.Context, b *bus.Bus, runID string) error {
	seq, err := b.LastSeq(ctx, events.RunFilter(runID))
	if err != nil {
		return err
	}
	if seq == 0 {
		return fmt.Errorf("run %s: no events in the log of %s (set PROCTOR_HOME or --nats to the store that holds it)", runID, g.storeName())
	}
	return nil
}

// storeName names the log commands read, for error messages.
func (g *globals) storeName() string {
	if g.natsURL != "" {
		return g.natsURL
	}
	return filepath.Join(g.home, "jetstream")
}

// writeOutput writes data to path atomically (a temporary file renamed
// into place, directories created), or to stdout when path is "-".
func (g *globals) writeOutput(path string, write func(io.Writer) error) error {
	if path == "-" {
		return write(g.stdout)
	}
	return atomicfile.Write(path, write)
}
