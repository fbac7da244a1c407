package scalerig

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// Report is what one run of the rig measured.
type Report struct {
	Config Config
	// Reference is the single-node run's artifact ("" without one).
	Reference string
	Start     time.Time
	Replicas  int
	// Runs and Cells submitted and planned; Verdicts the cells whose last
	// attempt has exactly one terminal event, a Verdict; Retried the
	// cells run more than once (a fault's); ExtraVerdicts the Verdict
	// events of earlier attempts.
	Runs, Cells, Verdicts, Retried, ExtraVerdicts int
	// RunsProjectedOnce are the runs whose artifact has one row per
	// planned cell; ArtifactsEqual of ArtifactsCompared equal the single
	// node's artifact.
	RunsProjectedOnce, ArtifactsEqual, ArtifactsCompared int
	Events                                               int
	AgentEventsPerCell                                   float64
	// Window is the measured stretch; CellsInWindow the cells that ended
	// in it; CellsPerHour their rate.
	Window        time.Duration
	CellsInWindow int
	CellsPerHour  float64
	// RoleCores is each role's CPU in the window, in cores (1 = one core
	// busy the whole window); ControlCores the control plane's (servers,
	// planner, aggregator); ControlPerThousand that per 1,000 cells an
	// hour. MachineBusy is the whole machine's busy cores in the window,
	// MachineCores its cores.
	RoleCores                 map[string]float64
	ControlCores              float64
	ControlPerThousand        float64
	MachineBusy, MachineCores float64
	// Dispatch is a launch job stored on the work queue to a launcher
	// taking it (its first delivery; the launchers' claim lines), over
	// Claims jobs. FirstEvent is the run's RunPlanned (after which the
	// planner publishes the jobs) to the launcher's first event of the
	// cell's first attempt (the task loaded, the image looked up).
	DispatchP50, DispatchP99, DispatchMax time.Duration
	Claims                                int
	FirstEventP50, FirstEventP99          time.Duration
	// FinishLag is a run's last cell's terminal event to its
	// RunFinished (the aggregator's part): the median, and the longest
	// with its run. A lag over twice the AckWait plus a minute is a
	// problem (a run the aggregator stopped following).
	FinishLagP50, FinishLagMax time.Duration
	FinishLagRun               string
	// BaselineGap is the longest stretch without a cell ending in the
	// first quarter of the window (no fault yet), to read the faults'
	// stalls against.
	BaselineGap time.Duration
	Faults      []FaultResult
	// What shows the nodes shared nothing but NATS (checkNoSharing):
	// InputsRemoved runs had their tasks root and agent directory taken
	// away after planning, RemoveP50/RemoveMax after their first
	// CellPlanned's stamp; ClaimsAfterRemoval launch jobs (first
	// deliveries) were taken after that, ClaimsWithTrees by a worker
	// that holds the cell's task tree and agent tree in its own cache.
	// TreesStored trees and OutputObjects outputs (OutputBytes) are in
	// the bucket; TreesFetched trees are in the caches of
	// FetchingWorkers workers. OutputsNamed verdicts name a stored
	// output; OutputsWritten rows' output directories, under their
	// driver's --output-dir, hold the cell's reward.txt.
	// InputsHidden: every worker started with the runs' inputs hidden
	// from its view (Config.HideInputs), so a job taken before the
	// rename read nothing at a planned path either; such jobs are
	// ClaimsBeforeRemoval, not a problem.
	InputsHidden                        bool
	ClaimsBeforeRemoval                 int
	InputsRemoved                       int
	RemoveP50, RemoveMax                time.Duration
	ClaimsAfterRemoval, ClaimsWithTrees int
	TreesStored, TreesFetched           int
	FetchingWorkers                     int
	OutputObjects, OutputsNamed         int
	OutputsWritten                      int
	OutputBytes                         int64
	Problems                            []string
}

// FaultResult is one fault's recovery.
type FaultResult struct {
	What string
	At   time.Duration // after the first run's submission
	// Ready is the kill to the restarted process up (a server: healthy,
	// current with its peers).
	Ready time.Duration
	// Stall is the longest stretch without a cell ending from the kill
	// to twice the AckWait after the restart.
	Stall time.Duration
	// RunsWaiting ended their last cell between the kill and the
	// restart; Finish is the latest of their RunFinished after the kill.
	RunsWaiting int
	Finish      time.Duration
}

// OK reports whether the rig found nothing wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 && r.Runs > 0 }

// Write prints the report as a table.
func (r *Report) Write(w io.Writer) {
	c := r.Config
	sec := func(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(w, "\nscale rig: %d NATS servers (R%d), %d workers × %d slots, offered %.0f cells/h for %v, runs of %d cells, solve %v verify %v, %d agent events a cell\n",
		c.Nodes, r.Replicas, c.Workers, c.Concurrency, c.Rate, c.Duration, c.Tasks*c.Repeats, c.Sim.Solve, c.Sim.Verify, c.Sim.Events)
	row := func(k, v, target string) { fmt.Fprintf(w, "  %-44s %-30s %s\n", k, v, target) }
	row("measure", "value", "target")
	row("cells/h sustained (window "+fmt.Sprintf("%.0f s", r.Window.Seconds())+")", fmt.Sprintf("%.0f (%d cells)", r.CellsPerHour, r.CellsInWindow), fmt.Sprintf("offered %.0f", c.Rate))
	row("control plane CPU, cores", fmt.Sprintf("%.3f", r.ControlCores), "")
	row("control plane per 1,000 cells/h", fmt.Sprintf("%.1f %% of a core", 100*r.ControlPerThousand), "< 10 %")
	roles := make([]string, 0, len(r.RoleCores))
	for k := range r.RoleCores {
		roles = append(roles, k)
	}
	sort.Strings(roles)
	for _, k := range roles {
		row("  cores: "+k, fmt.Sprintf("%.3f", r.RoleCores[k]), "")
	}
	row("machine busy (all processes)", fmt.Sprintf("%.2f of %.0f cores", r.MachineBusy, r.MachineCores), "")
	row(fmt.Sprintf("dispatch latency p50 / p99 / max (%d jobs)", r.Claims), sec(r.DispatchP50)+" / "+sec(r.DispatchP99)+" / "+sec(r.DispatchMax), "p99 < 0.5 s")
	row("planned to the launcher's first event p50 / p99", sec(r.FirstEventP50)+" / "+sec(r.FirstEventP99), "")
	row("last cell to RunFinished p50 / max", sec(r.FinishLagP50)+" / "+sec(r.FinishLagMax), "")
	row("runs; cells planned", fmt.Sprintf("%d; %d", r.Runs, r.Cells), "")
	row("cells with exactly one verdict", fmt.Sprintf("%d of %d", r.Verdicts, r.Cells), "all")
	row("runs projected once (one row a cell)", fmt.Sprintf("%d of %d", r.RunsProjectedOnce, r.Runs), "all")
	if r.ArtifactsCompared > 0 {
		row("artifacts equal to the single node's", fmt.Sprintf("%d of %d", r.ArtifactsEqual, r.ArtifactsCompared), "all")
	}
	row("cells retried; verdicts of earlier attempts", fmt.Sprintf("%d; %d", r.Retried, r.ExtraVerdicts), "")
	row("events in the log; agent events a cell", fmt.Sprintf("%d; %.1f", r.Events, r.AgentEventsPerCell), "")
	row("runs whose inputs were gone once planned", fmt.Sprintf("%d of %d (%.0f / %.0f ms after)", r.InputsRemoved, r.Runs, ms(r.RemoveP50), ms(r.RemoveMax)), "all")
	if r.InputsHidden {
		row("inputs on the workers' view", "none (hidden from each worker's start)", "none")
		row("jobs taken after their inputs were gone", fmt.Sprintf("%d of %d (%d before, on a view without them)", r.ClaimsAfterRemoval, r.Claims, r.ClaimsBeforeRemoval), "")
	} else {
		row("jobs taken after their inputs were gone", fmt.Sprintf("%d of %d", r.ClaimsAfterRemoval, r.Claims), "all")
	}
	row("jobs whose worker fetched the cell's trees", fmt.Sprintf("%d of %d", r.ClaimsWithTrees, r.Claims), "all")
	row("trees stored; fetched (workers)", fmt.Sprintf("%d; %d (%d)", r.TreesStored, r.TreesFetched, r.FetchingWorkers), "")
	if c.StoreOutputs {
		row("outputs stored (MB); named by verdicts", fmt.Sprintf("%d (%.1f); %d of %d", r.OutputObjects, float64(r.OutputBytes)/1e6, r.OutputsNamed, r.Verdicts), "all")
		row("outputs written by the drivers", fmt.Sprintf("%d of %d", r.OutputsWritten, r.Cells), "all")
	} else {
		row("outputs", "at their planned paths (not stored)", "")
	}
	row("longest stretch without a cell ending", sec(r.BaselineGap)+" (no fault)", "")
	for _, f := range r.Faults {
		v := fmt.Sprintf("up %.1f s, stall %.1f s", f.Ready.Seconds(), f.Stall.Seconds())
		if f.RunsWaiting > 0 {
			v += fmt.Sprintf(", %d runs finished ≤ %.1f s after", f.RunsWaiting, f.Finish.Seconds())
		}
		row(fmt.Sprintf("fault at %.0f s: %s", f.At.Seconds(), f.What), v, "")
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "  nothing lost or duplicated")
		return
	}
	fmt.Fprintf(w, "  %d problems:\n", len(r.Problems))
	for i, p := range r.Problems {
		if i == 20 {
			fmt.Fprintf(w, "    … and %d more\n", len(r.Problems)-20)
			break
		}
		fmt.Fprintf(w, "    %s\n", p)
	}
}
