package artifact

// BuildOptions tunes Build. The zero value means defaults.
type BuildOptions struct {
}

// Build assembles a task_runs.v1 artifact from a run's rows: the rows are
// copied and sorted by (task, harness, model, repeat), ties broken by
// attempt and cell_id; Summary.PerHarness is Summarize(rows); when
// run.BaselineHarness is set, Summary.Comparisons is Compare(rows,
// run.BaselineHarness, opts.Compare) with every float rounded as Decimals
// and PValueDigits say. Build neither validates nor modifies its inputs;
// Marshal and WriteFile validate. The same inputs always give an artifact
// that marshals to the same bytes.
func Build(run RunInfo, results []Result, opts BuildOptions) *Artifact {
	rows := sortedRows(results)
	a := &Artifact{
		Schema:  SchemaVersion,
		Run:     run,
		Results: rows,
		Summary: Summary{PerHarness: Summarize(rows)},
	}
	if run.BaselineHarness != "" {
		// TODO(compare.go): a.Summary.Comparisons = roundComparisons(Compare(rows, run.BaselineHarness, opts.Compare))
	}
	return a
}

// roundComparisons rounds every float of cs in place (see Decimals) and
// returns cs; nil entries are dropped.
func roundComparisons(cs map[string]*Comparison) map[string]*Comparison {
	for h, c := range cs {
		if c == nil {
			delete(cs, h)
			continue
		}
		c.PassRateDelta = roundPtr(c.PassRateDelta)
		c.CostDeltaUSD = roundPtr(c.CostDeltaUSD)
		c.NormalizedGain = roundPtr(c.NormalizedGain)
		c.NormalizedChange = roundPtr(c.NormalizedChange)
		m := &c.McNemar
		m.PairedPassRateDelta = roundPtr(m.PairedPassRateDelta)
		m.CILo = roundPtr(m.CILo)
		m.CIHi = roundPtr(m.CIHi)
		m.PExact = roundSigPtr(m.PExact)
		m.PAdjusted = roundSigPtr(m.PAdjusted)
	}
	return cs
}
