package projection

import "github.com/proctor-eval/proctor/pkg/artifact"

// PlannedArtifact is the artifact a run would start from, for a dry run
// (`tasks run --dry-run --out-json`): the projection of a log holding the
// run's RunRequested and its cells' planning events only. A cell with a
// terminal event (a refusal) is its row as a run would write it; every
// other cell is planned (artifact.OutcomePlanned): no verdict, not
// errored, in no comparison.
func (p *Projector) PlannedArtifact(version string) *artifact.Artifact {
	run, rows := p.Input(version)
	for i, r := range rows {
		if p.CellDone(r.CellID) {
			continue
		}
		rows[i] = artifact.Result{
			CellID: r.CellID, Task: r.Task, Harness: r.Harness, HarnessKind: r.HarnessKind, Model: r.Model,
			Repeat: r.Repeat, Attempt: r.Attempt, Outcome: artifact.OutcomePlanned,
			TaskRevision: r.TaskRevision, OutputDir: r.OutputDir, TaskMeta: r.TaskMeta,
			Metrics: artifact.Metrics{UnknownKeys: r.Metrics.UnknownKeys},
		}
	}
	return artifact.Build(run, rows, p.BuildOptions())
}
