package artifact

// BuildOptions tunes Build. The zero value means defaults.
type BuildOptions struct {
	// Compare configures the paired comparisons (bootstrap resamples and
	// seed); the zero value means stats' defaults.
	Compare CompareOptions
}

// Build assembles a task_runs.v1 artifact from a run's rows: the rows are
// copied and sorted by (task, harness, model, repeat), ties broken by
// attempt and cell_id; Summary.PerHarness is Summarize(rows); when
// run.BaselineHarness is set, Summary.Comparisons is Compare(rows,
// run.BaselineHarness, opts.Compare), left out when nothing is compared
// (no baseline rows, or no harness besides the baseline, oracle and
// probe). Every float of the summary is rounded as Decimals and
// PValueDigits say, by Summarize and Compare. Build neither validates nor
// modifies its inputs; Marshal and WriteFile validate. The same inputs
// always give an artifact that marshals to the same bytes.
func Build(run RunInfo, results []Result, opts BuildOptions) *Artifact {
	rows := sortedRows(results)
	a := &Artifact{
		Schema:  SchemaVersion,
		Run:     run,
		Results: rows,
		Summary: Summary{PerHarness: Summarize(rows)},
	}
	if run.BaselineHarness != "" {
		if cs := Compare(rows, run.BaselineHarness, opts.Compare); len(cs) > 0 {
			a.Summary.Comparisons = cs
		}
	}
	return a
}
