package view

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"unicode/utf8"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/projection"
)

// Limits of the cell page's file listing.
const (
	// TailBytes is the tail of each text file shown on the cell page.
	TailBytes = 8 << 10
	// maxFiles bounds the files listed from a cell's output directory.
	maxFiles = 500
)

// CellPage is the JSON of /runs/RUN/cells/CELL.json.
type CellPage struct {
	RunID  string `json:"run_id"`
	CellID string `json:"cell_id"`
	// State is the cell's outcome, running or queued; "pending" for a cell
	// the log does not have planned yet (the page retries).
	State string `json:"state"`
	// Plan is where the cell sits and where its files go; nil while pending.
	Plan *projection.PlannedCell `json:"plan,omitempty"`
	// Row is the artifact row the cell projects to so far, with every
	// metric; nil while pending.
	Row *artifact.Result `json:"row,omitempty"`
	// ClaimedButFailed is true when the row's agent claimed success while
	// the verifier scored the cell below 1 (artifact.Result.Overclaimed):
	// the page flags it ⚠️ beside the claim.
	ClaimedButFailed bool `json:"claimed_but_failed,omitempty"`
	// Timeline is one page of the cell's events, every attempt, in log order.
	Timeline       []events.Envelope `json:"timeline"`
	TimelinePaging Paging            `json:"timeline_paging"`
	// Transcript is one page of the agent's Message, ToolCall, Command and
	// FileChange events.
	Transcript       []events.Envelope `json:"transcript"`
	TranscriptPaging Paging            `json:"transcript_paging"`
	// Egress is every EgressDecision of the cell.
	Egress []events.EgressDecisionData `json:"egress"`
	// ModelCalls is every ModelCall of the cell (the model gateway's
	// record of each call; the row's metrics.usage_observed sums them).
	ModelCalls []events.ModelCallData `json:"model_calls"`
	// Files lists the cell's output directory; FilesPending is true when it
	// does not exist yet.
	Files        []CellFile `json:"files"`
	FilesPending bool       `json:"files_pending"`
}

// CellFile is one regular file of a cell's output directory: its path
// relative to the directory, size in bytes, the last TailBytes as text
// (logs, rewards and other small text files), and the URL of the whole.
type CellFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	Tail string `json:"tail,omitempty"`
	// Truncated is true when Tail is not the whole file.
	Truncated bool   `json:"truncated,omitempty"`
	URL       string `json:"url"`
}

// transcriptTypes are the events the transcript shows.
var transcriptTypes = []events.Type{events.Message, events.ToolCall, events.Command, events.FileChange}

func (s *Server) cellJSON(w http.ResponseWriter, r *http.Request, runID, cellID string) {
	v, err := s.cell(r.Context(), r, runID, cellID)
	writeJSON(w, v, err)
}

func (s *Server) cell(ctx context.Context, r *http.Request, runID, cellID string) (*CellPage, error) {
	lg, err := s.log(ctx)
	if err != nil {
		return nil, settle(lg, err)
	}
	rec, _, err := runRecord(ctx, lg, runID)
	if err != nil {
		return nil, settle(lg, err)
	}
	l, err := s.lives.get(ctx, runID, rec.Epoch)
	if err != nil {
		return nil, settle(lg, err)
	}
	out := &CellPage{RunID: runID, CellID: cellID, State: "pending", Timeline: []events.Envelope{},
		Transcript: []events.Envelope{}, Egress: []events.EgressDecisionData{}, ModelCalls: []events.ModelCallData{},
		Files: []CellFile{}, FilesPending: true}
	l.mu.Lock()
	plan, planned := l.p.Plan(cellID)
	finished := l.p.Finished()
	if planned {
		row, _ := l.p.Row(cellID)
		out.Plan, out.Row, out.State = &plan, &row, l.p.CellState(cellID)
		out.ClaimedButFailed = row.Overclaimed()
	}
	l.mu.Unlock()
	if !planned {
		if finished {
			return nil, httpError{http.StatusNotFound, fmt.Sprintf("run %s has no cell %s", runID, cellID)}
		}
		return out, nil // not planned yet: pending, and the page retries
	}
	var evs []events.Envelope
	filter := "proctor.run." + runID + ".cell." + events.CellHash(cellID) + ".>"
	if err := lg.Bus.Read(ctx, []string{filter}, func(e events.Envelope) error {
		if e.CellID == cellID {
			evs = append(evs, e)
		}
		return nil
	}); err != nil {
		return nil, settle(lg, err)
	}
	var tr []events.Envelope
	for _, e := range evs {
		if slices.Contains(transcriptTypes, e.Type) {
			tr = append(tr, e)
		}
		if e.Type == events.EgressDecision {
			var d events.EgressDecisionData
			if events.Into(e, &d) == nil {
				out.Egress = append(out.Egress, d)
			}
		}
		if e.Type == events.ModelCall {
			var d events.ModelCallData
			if events.Into(e, &d) == nil {
				out.ModelCalls = append(out.ModelCalls, d)
			}
		}
	}
	pg, lo, hi := pageOf(r, "events", len(evs))
	out.Timeline, out.TimelinePaging = append(out.Timeline, evs[lo:hi]...), pg
	pg, lo, hi = pageOf(r, "transcript", len(tr))
	out.Transcript, out.TranscriptPaging = append(out.Transcript, tr[lo:hi]...), pg
	if plan.OutputDir != "" {
		files, err := listFiles(plan.OutputDir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, settle(lg, err)
		default:
			out.FilesPending = false
			for _, f := range files {
				f.URL = "/runs/" + url.PathEscape(runID) + "/file?cell=" + url.QueryEscape(cellID) + "&name=" + url.QueryEscape(f.Name)
				out.Files = append(out.Files, f)
			}
		}
	}
	return out, nil
}

// listFiles walks dir (without following symbolic links: an agent's
// files are hostile) and returns its regular files with their tails, in
// path order, at most maxFiles.
func listFiles(dir string) ([]CellFile, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var out []CellFile
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable entry is left out, not fatal
		}
		if len(out) >= maxFiles {
			return fs.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		f := CellFile{Name: p, Size: info.Size()}
		f.Tail, f.Truncated = tail(root, p, info.Size())
		out = append(out, f)
		return nil
	})
	return out, err
}

// tail reads the last TailBytes of a text file under root, cut to valid
// UTF-8; "" for a file that is not text (a NUL byte in its tail).
func tail(root *os.Root, name string, size int64) (string, bool) {
	f, err := root.Open(name)
	if err != nil {
		return "", false
	}
	defer f.Close()
	off := max(0, size-TailBytes)
	buf := make([]byte, size-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", false
	}
	buf = buf[:n]
	if slices.Contains(buf, 0) {
		return "", false
	}
	// Drop a rune cut by the offset, then any invalid byte.
	for off > 0 && len(buf) > 0 && !utf8.RuneStart(buf[0]) {
		buf = buf[1:]
	}
	return string([]rune(string(buf))), off > 0
}

// file serves one file of a cell's output directory as plain text (never
// as HTML: the agent wrote it), resolved inside the directory with
// os.Root so no path or link escapes it.
func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	runID, cellID, name := r.PathValue("run"), r.URL.Query().Get("cell"), r.URL.Query().Get("name")
	lg, err := s.log(r.Context())
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	rec, _, err := runRecord(r.Context(), lg, runID)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	l, err := s.lives.get(r.Context(), runID, rec.Epoch)
	if err != nil {
		writeJSON(w, nil, settle(lg, err))
		return
	}
	l.mu.Lock()
	plan, ok := l.p.Plan(cellID)
	l.mu.Unlock()
	if !ok || plan.OutputDir == "" || name == "" || !fs.ValidPath(name) {
		http.Error(w, "no such cell file", http.StatusNotFound)
		return
	}
	root, err := os.OpenRoot(plan.OutputDir)
	if err != nil {
		http.Error(w, "pending: the cell's directory is not written yet", http.StatusNotFound)
		return
	}
	defer root.Close()
	info, err := root.Lstat(name)
	if err != nil || !info.Mode().IsRegular() {
		http.Error(w, "no such cell file", http.StatusNotFound)
		return
	}
	f, err := root.Open(name)
	if err != nil {
		http.Error(w, "no such cell file", http.StatusNotFound)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	w.Header().Set("Content-Disposition", "inline; filename="+fmt.Sprintf("%q", path.Base(name)))
	http.ServeContent(w, r, "", info.ModTime(), f)
}
