package projection

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/atomicfile"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Source is the envelope source of the RunFinished event that closes a
// run, whether the aggregator publishes it or Finish does on its behalf.
const Source = "aggregator"

// Project reads every stored event of a run (bus.ReadRun) and folds it.
// The errors are the bus's: a read that failed or an envelope that did not
// decode. Data that did not decode is counted (DecodeErrors), not an error.
func Project(ctx context.Context, b *bus.Bus, runID string) (*Projector, error) {
	p := NewProjector(runID)
	if err := b.ReadRun(ctx, runID, func(e events.Envelope) error { p.Apply(e); return nil }); err != nil {
		return nil, err
	}
	return p, nil
}

// Render returns the artifact JSON (validated against task_runs.v1) and the
// Markdown report of a projection.
func Render(p *Projector, version string) (js, md []byte, err error) {
	a := p.Artifact(version)
	js, err = artifact.Marshal(a)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	if err := artifact.WriteReport(&buf, a); err != nil {
		return nil, nil, err
	}
	return js, buf.Bytes(), nil
}

// RenderWithFigures is the artifact JSON (validated against task_runs.v1)
// and the report with its figures (artifact.ReportWithFigures) rendered
// from that JSON: the report ends with a "Figures" section linking them by
// file name, relative to the report, so the report's bytes do not depend
// on where it is written. WriteResults, replay and `proctor report` all
// render this way, so a replay, or a report re-rendered from the artifact
// file, reproduces the aggregator's report byte for byte.
func RenderWithFigures(p *Projector, version string) (js, md []byte, figs []artifact.Figure, err error) {
	js, err = artifact.Marshal(p.Artifact(version))
	if err != nil {
		return nil, nil, nil, err
	}
	var a artifact.Artifact // from the validated bytes: no second validation
	if err := json.Unmarshal(js, &a); err != nil {
		return nil, nil, nil, err
	}
	md, figs, err = artifact.ReportWithFigures(&a)
	if err != nil {
		return nil, nil, nil, err
	}
	return js, md, figs, nil
}

// WriteFigures writes each figure beside the report at mdPath (same
// directory, the figure's Name), atomically.
func WriteFigures(mdPath string, figs []artifact.Figure) error {
	for _, f := range figs {
		if err := atomicfile.WriteBytes(filepath.Join(filepath.Dir(mdPath), f.Name), f.SVG); err != nil {
			return err
		}
	}
	return nil
}

// Paths are where a run's artifact and report go: the spec's --out-json
// and --out-md; without --out-md the report goes beside --out-json
// (artifact.ReportPath: results/x.json → results/x.md); without either,
// task_runs.json and report.md in the run's output dir.
func Paths(spec events.RunSpec) (js, md string) {
	js, md = spec.OutJSON, spec.OutMD
	if md == "" && js != "" {
		md = artifact.ReportPath(js)
	}
	if js == "" {
		js = filepath.Join(spec.OutputDir, "task_runs.json")
	}
	if md == "" {
		md = filepath.Join(spec.OutputDir, "report.md")
	}
	return js, md
}

// WriteResults renders the projection, writes the figures beside the
// report, writes both files (at Paths of the run's spec, atomically) and
// records them and the run's final status (the RunFinished status, else
// finished) in the run index.
func WriteResults(ctx context.Context, b *bus.Bus, runID string, p *Projector, version string) error {
	js, md, figs, err := RenderWithFigures(p, version)
	if err != nil {
		return fmt.Errorf("projection: run %s: %w", runID, err)
	}
	jsPath, mdPath := Paths(p.Spec())
	if err := WriteFigures(mdPath, figs); err != nil {
		return fmt.Errorf("projection: %w", err)
	}
	for path, data := range map[string][]byte{jsPath: js, mdPath: md} {
		if err := atomicfile.WriteBytes(path, data); err != nil {
			return fmt.Errorf("projection: %w", err)
		}
	}
	status := bus.StatusFinished
	if p.finished != nil && p.finished.Status != "" {
		status = p.finished.Status
	}
	return b.UpdateRun(ctx, runID, func(r *bus.RunRecord) {
		r.Status = status
		r.Counts = p.Counts()
		r.Artifact, r.Report = jsPath, mdPath
		if !p.finishedAt.IsZero() {
			r.FinishedAt = p.finishedAt.UTC().Format(time.RFC3339Nano)
		}
		if p.PlanError() != "" {
			r.Error = p.PlanError()
		} else if status == bus.StatusCancelled && p.finished.Error != "" {
			r.Error = p.finished.Error
		}
	})
}

// Finish ends a run that will not complete (interrupted): it publishes
// RunFinished with status unless the log already has one (with the
// epoch's id, events.RunFinishedID, so a RunFinished of the same epoch
// published meanwhile by an aggregator is the one kept), projects the
// whole log (unfinished cells become errored rows), writes the results
// (WriteResults) and returns the run's index record.
func Finish(ctx context.Context, b *bus.Bus, runID, status, version string) (bus.RunRecord, error) {
	p, err := Project(ctx, b, runID)
	if err != nil {
		return bus.RunRecord{}, err
	}
	if !p.Finished() {
		// The epoch's one id: an aggregator's RunFinished of the same
		// epoch published meanwhile keeps its place, this one dropped.
		e := events.Must(events.RunFinished, runID, "", 0, Source,
			events.RunFinishedData{Status: status, Counts: p.Counts(), Epoch: p.Epoch()})
		e.ID = events.RunFinishedID(runID, p.Epoch())
		if err := b.PublishAll(ctx, e); err != nil {
			return bus.RunRecord{}, err
		}
		if p, err = Project(ctx, b, runID); err != nil {
			return bus.RunRecord{}, err
		}
	}
	if err := WriteResults(ctx, b, runID, p, version); err != nil {
		return bus.RunRecord{}, err
	}
	return b.GetRun(ctx, runID)
}
