package scalerig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// cellLog is what the event log says of one cell.
type cellLog struct {
	// verdicts counts the Verdict events of every attempt.
	verdicts int
	attempt  int // the last attempt seen
	// terminal counts the Verdict and CellErrored events of the last
	// attempt; passedOK says the last one was a Verdict.
	terminal  int
	verdict   bool
	endAt     time.Time // the last attempt's terminal event
	agent     int       // Started, Message and Finished events of the last attempt
	firstLoad time.Time // the launcher's first event of attempt 1
	// revision and trees are the task's revision and the digests of the
	// other trees it reads (CellPlanned): what a worker fetches.
	revision string
	trees    []string
	// output says the last attempt's Verdict names a stored output
	// object.
	output bool
}

// runLog is what the event log says of one run.
type runLog struct {
	planned    time.Time // RunPlanned: the launch jobs are published right after it
	cells      int       // RunPlanned's count
	finished   int       // RunFinished events
	finishedAt time.Time
	byCell     map[string]*cellLog
	events     int
}

// logStats is the whole event log read once.
type logStats struct {
	runs   map[string]*runLog
	events int
	dupIDs int // event ids seen twice: the stream's dedupe failed
}

// readLog reads every event of every run on b.
func readLog(ctx context.Context, b *bus.Bus) (*logStats, error) {
	st := &logStats{runs: map[string]*runLog{}}
	seen := map[string]bool{}
	err := b.Read(ctx, []string{"proctor.run.>"}, func(e events.Envelope) error {
		st.events++
		if seen[e.ID] {
			st.dupIDs++
			return nil
		}
		seen[e.ID] = true
		rl := st.runs[e.RunID]
		if rl == nil {
			rl = &runLog{byCell: map[string]*cellLog{}}
			st.runs[e.RunID] = rl
		}
		rl.events++
		switch e.Type {
		case events.RunPlanned:
			var d events.RunPlannedData
			if err := json.Unmarshal(e.Data, &d); err == nil {
				rl.cells = d.Cells
			}
			rl.planned = e.At
			return nil
		case events.RunFinished:
			rl.finished++
			rl.finishedAt = e.At
			return nil
		}
		if e.CellID == "" {
			return nil
		}
		c := rl.byCell[e.CellID]
		if c == nil {
			c = &cellLog{}
			rl.byCell[e.CellID] = c
		}
		if e.Type == events.CellPlanned {
			var d events.CellPlannedData
			if err := events.Into(e, &d); err == nil {
				c.revision = d.TaskRevision
				for _, t := range d.Trees {
					c.trees = append(c.trees, t.Digest)
				}
			}
		}
		if e.Attempt > c.attempt {
			c.attempt, c.terminal, c.agent, c.verdict, c.output = e.Attempt, 0, 0, false, false
		}
		if e.Attempt == 1 && e.Source == "launcher" && c.firstLoad.IsZero() {
			c.firstLoad = e.At
		}
		if e.Attempt < c.attempt {
			if e.Type == events.Verdict {
				c.verdicts++
			}
			return nil
		}
		switch e.Type {
		case events.Verdict:
			c.verdicts++
			c.terminal++
			c.verdict, c.endAt = true, e.At
			var d events.VerdictData
			c.output = events.Into(e, &d) == nil && d.Output != nil
		case events.CellErrored:
			c.terminal++
			c.verdict, c.endAt = false, e.At
		case events.Started, events.Message, events.Finished:
			c.agent++
		}
		return nil
	})
	return st, err
}

// artifactRow is what the rig reads of an artifact's row.
type artifactRow struct {
	CellID    string `json:"cell_id"`
	Outcome   string `json:"outcome"`
	OutputDir string `json:"output_dir"`
}

// artifactRows reads an artifact's rows.
func artifactRows(path string) ([]artifactRow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var a struct {
		Results []artifactRow `json:"results"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a.Results, nil
}

// normalized is an artifact with what differs between two runs of one
// plan taken out (normalize).
type normalized struct {
	text string
}

// volatile are the keys dropped at any depth, with every key ending in
// _sec (durations): times, the run's id and paths, attempts (a fault's
// retry is a later attempt of the same cell).
var volatile = map[string]bool{
	"id": true, "started_at": true, "finished_at": true, "elapsed_sec": true, "output_dir": true,
	"attempt": true, "attempts": true, "proctor_version": true,
	"at": true, "first": true,
}

// normalize reads the artifact at path and drops the volatile keys; the
// run's inputs directory inputs (its tasks root and agent directory were
// under it, so it is in the harness's name and the cell ids) is written
// as INPUTS.
func normalize(path, inputs string) (*normalized, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if inputs != "" {
		b = bytes.ReplaceAll(b, []byte(inputs), []byte("INPUTS"))
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	v = drop(v)
	out, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return nil, err
	}
	return &normalized{text: string(out)}, nil
}

func drop(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k := range x {
			if volatile[k] || strings.HasSuffix(k, "_sec") {
				delete(x, k)
				continue
			}
			x[k] = drop(x[k])
		}
	case []any:
		for i := range x {
			x[i] = drop(x[i])
		}
	}
	return v
}

// firstDiff is the first line where a and b differ, with its number.
func firstDiff(a, b string) string {
	al, bl := splitLines(a), splitLines(b)
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: %q vs the reference's %q", i+1, x, y)
		}
	}
	return ""
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// percentile is the p-th percentile (0..1) of xs by nearest rank; 0 for
// none.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
