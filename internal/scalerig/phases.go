package scalerig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/bus"
)

// reference runs the plan once on a single node (one nats-server, the
// planner, the aggregator, one worker with a slot for every cell) and
// returns its artifact, normalized; it stops those processes.
func (r *rig) reference(ctx context.Context, rep *Report) (*normalized, error) {
	r.logf("reference: one run of %d cells on a single node", r.cfg.Tasks*r.cfg.Repeats)
	nodes, err := writeNATS(filepath.Join(r.cfg.Dir, "nats-ref"), 1)
	if err != nil {
		return nil, err
	}
	if err := r.startNATS(ctx, nodes, "ref-"); err != nil {
		return nil, err
	}
	url := natsURLs(nodes)
	h, err := hideInputs(nodes[0].url(), r.inputs)
	if err != nil {
		return nil, err
	}
	defer h.close()
	if err := r.startControl(url, "ref-"); err != nil {
		return nil, err
	}
	if err := r.startWorker(url, "ref-w1", r.cfg.Tasks*r.cfg.Repeats); err != nil {
		return nil, err
	}
	s, err := r.submit(url, "ref-", 0)
	if err != nil {
		return nil, err
	}
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	rep.Reference = s.artifact
	r.stopAll()
	r.control, r.workers = nil, nil
	r.logf("reference: run %s %s in %.1fs", s.runID, s.status, time.Since(s.at).Seconds())
	return normalize(s.artifact, s.inputs)
}

// fault is one fault injected during the run.
type fault struct {
	what        string
	kill, ready time.Time // the kill, and the restarted process ready
	names       []string
}

// cluster runs the measured part: the cluster, the services, the
// workers, the runs at the offered rate, the faults; then reads the log
// and the artifacts into rep.
func (r *rig) cluster(ctx context.Context, rep *Report, ref *normalized) error {
	cfg := r.cfg
	nodes, err := writeNATS(filepath.Join(cfg.Dir, "nats"), cfg.Nodes)
	if err != nil {
		return err
	}
	r.nodes = nodes
	if err := r.startNATS(ctx, nodes, ""); err != nil {
		return err
	}
	url := natsURLs(nodes)
	b, err := bus.Connect(ctx, url, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	// The first node: the faults kill the last.
	if r.hider, err = hideInputs(nodes[0].url(), r.inputs); err != nil {
		return err
	}
	defer r.hider.close()
	r.logf("cluster: %d servers up; streams at R%d", len(nodes), bus.DefaultReplicas(b.NC))
	rep.Replicas = bus.DefaultReplicas(b.NC)
	if err := r.startControl(url, ""); err != nil {
		return err
	}
	for i := range cfg.Workers {
		if err := r.startWorker(url, workerName(i), cfg.Concurrency); err != nil {
			return err
		}
	}
	per := cfg.Tasks * cfg.Repeats
	interval := time.Duration(float64(time.Hour) * float64(per) / cfg.Rate)
	nRuns := max(1, int((cfg.Duration+interval-1)/interval))
	r.logf("cluster: %d workers × %d slots; %d runs of %d cells, one every %.1fs (%.0f cells/h offered)", cfg.Workers, cfg.Concurrency, nRuns, per, interval.Seconds(), cfg.Rate)

	t0 := time.Now()
	rep.Start = t0
	cellTime := cfg.Sim.Solve + cfg.Sim.Verify
	warm := cellTime + 10*time.Second
	if warm > cfg.Duration/2 {
		warm = 0
	}
	ws, we := t0.Add(warm), t0.Add(cfg.Duration)
	// The CPU samples: at the window's start and at its end (or when
	// every run has finished, if that is sooner).
	type sample struct {
		at      time.Time
		cpu     map[string]time.Duration
		busy, t time.Duration
	}
	take := func() sample {
		bz, tot := machineCPU()
		return sample{at: time.Now(), cpu: r.ps.roleCPU(), busy: bz, t: tot}
	}
	var s0 sample
	s0ready := make(chan struct{})
	go func() {
		defer close(s0ready)
		select {
		case <-time.After(time.Until(ws)): // the window's start
		case <-ctx.Done():
		}
		s0 = take()
	}()

	// A CPU profile of one server over the middle third of the window
	// (the first node: the faults kill the last).
	if cfg.Profile && warm > 0 {
		go func() {
			d := we.Sub(ws) / 3
			select {
			case <-time.After(time.Until(ws.Add(d))): // the window's middle third
			case <-ctx.Done():
				return
			}
			dir := filepath.Join(cfg.Dir, "profiles")
			if err := os.MkdirAll(dir, 0o755); err == nil {
				err = nodes[0].profile(ctx, d, filepath.Join(dir, "nats-"+nodes[0].name+".pprof"))
				if err != nil {
					r.logf("profile of %s: %v", nodes[0].name, err)
				}
			}
		}()
	}

	var faults []*fault
	var fmu sync.Mutex
	faultsDone := make(chan struct{})
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	go func() {
		defer close(faultsDone)
		if !cfg.Faults {
			return
		}
		for i, f := range []func() *fault{
			func() *fault { return r.killNATS(fctx, nodes[len(nodes)-1]) },
			func() *fault { return r.killWorkers(url) },
			func() *fault { return r.killAggregator(url) },
		} {
			select {
			case <-time.After(time.Until(t0.Add(cfg.Duration * time.Duration(i+1) / 4))): // the fault's time in the run
			case <-fctx.Done():
				return
			}
			ft := f()
			fmu.Lock()
			faults = append(faults, ft)
			fmu.Unlock()
		}
	}()

	var subs []*submission
	var wg sync.WaitGroup
	errs := make(chan error, nRuns)
	for i := range nRuns {
		select {
		case <-time.After(time.Until(t0.Add(time.Duration(i) * interval))): // the offered rate
		case <-ctx.Done():
			return ctx.Err()
		}
		s, err := r.submit(url, "", i)
		if err != nil {
			return err
		}
		subs = append(subs, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.wait(ctx); err != nil {
				errs <- err
				return
			}
			r.logf("run %d (%s) %s after %.1fs", s.n, s.runID, s.status, time.Since(s.at).Seconds())
		}()
	}
	r.logf("cluster: all %d runs submitted", nRuns)
	// The window ends at Duration, or when every run has finished.
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	// A short rig (no warm-up) measures until every run has finished.
	var windowEnd <-chan time.Time
	if warm > 0 {
		windowEnd = time.After(time.Until(we)) // the window's end
	}
	select {
	case <-windowEnd:
	case <-allDone:
	}
	<-s0ready
	s1 := take()
	<-allDone
	close(errs)
	stopFaults()
	<-faultsDone
	end := time.Now()
	var runErrs []string
	for err := range errs {
		runErrs = append(runErrs, err.Error())
	}

	// The window.
	rep.Window = s1.at.Sub(s0.at)
	win := rep.Window.Seconds()
	rep.RoleCores = map[string]float64{}
	for role, c := range s1.cpu {
		rep.RoleCores[role] = (c - s0.cpu[role]).Seconds() / win
	}
	for _, role := range controlRoles {
		rep.ControlCores += rep.RoleCores[role]
	}
	rep.MachineBusy = (s1.busy - s0.busy).Seconds() / win
	rep.MachineCores = (s1.t - s0.t).Seconds() / win

	r.logf("cluster: every run ended after %.1fs; reading the log", end.Sub(t0).Seconds())
	lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	st, err := readLog(lctx, b)
	if err != nil {
		return fmt.Errorf("scalerig: read the log: %w", err)
	}
	rep.Problems = append(rep.Problems, runErrs...)
	r.check(rep, st, subs, ref, ws, s1.at, faults)
	r.checkNoSharing(lctx, rep, b, st, subs)
	return nil
}

// controlRoles are the processes of the control plane.
var controlRoles = []string{"nats", "planner", "aggregator"}

func workerName(i int) string { return fmt.Sprintf("w%03d", i+1) }

// killNATS kills n with SIGKILL, restarts it after FaultDown and waits
// until it is healthy again.
func (r *rig) killNATS(ctx context.Context, n *natsNode) *fault {
	f := &fault{what: "kill -9 NATS node " + n.name, kill: time.Now(), names: []string{n.name}}
	r.ps.kill9(n.p)
	r.logf("fault: %s", f.what)
	time.Sleep(r.cfg.FaultDown) // the node stays down this long
	if err := r.startNode(n, ""); err != nil {
		r.logf("fault: restart %s: %v", n.name, err)
		return f
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := n.healthy(hctx); err != nil {
		r.logf("fault: %v", err)
		return f
	}
	f.ready = time.Now()
	r.logf("fault: %s healthy again %.1fs after the kill", n.name, f.ready.Sub(f.kill).Seconds())
	return f
}

// killWorkers kills FaultWorkers worker nodes with SIGKILL and restarts
// them under the same names after FaultDown.
func (r *rig) killWorkers(url string) *fault {
	var names []string
	for i := range r.cfg.FaultWorkers {
		names = append(names, workerName(i))
	}
	f := &fault{what: fmt.Sprintf("kill -9 %d worker nodes", len(names)), kill: time.Now(), names: names}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() { defer wg.Done(); r.ps.kill9(r.workers[name]) }()
	}
	wg.Wait()
	r.logf("fault: %s (%s)", f.what, strings.Join(names, ", "))
	time.Sleep(r.cfg.FaultDown) // the nodes stay down this long
	for _, name := range names {
		if err := r.startWorker(url, name, r.cfg.Concurrency); err != nil {
			r.logf("fault: restart %s: %v", name, err)
		}
	}
	f.ready = time.Now()
	return f
}

// killAggregator kills the aggregator with SIGKILL and restarts it after
// FaultDown.
func (r *rig) killAggregator(url string) *fault {
	f := &fault{what: "kill -9 the aggregator", kill: time.Now()}
	r.ps.kill9(r.control["aggregator"])
	r.logf("fault: %s", f.what)
	time.Sleep(r.cfg.FaultDown) // it stays down this long
	if err := r.startService(url, "", "aggregator"); err != nil {
		r.logf("fault: restart the aggregator: %v", err)
	}
	f.ready = time.Now()
	return f
}

// check fills rep from the log and the artifacts: cells an hour in the
// window [ws, we], the dispatch latencies, exactly-once, the artifacts
// against the reference, each fault's recovery.
func (r *rig) check(rep *Report, st *logStats, subs []*submission, ref *normalized, ws, we time.Time, faults []*fault) {
	problem := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	rep.Events = st.events
	if st.dupIDs > 0 {
		problem("%d events are in the log twice (same id)", st.dupIDs)
	}
	var ends []time.Time
	var agentSum int
	var firstEvent, lags []time.Duration
	type runEnd struct{ lastCell, finished time.Time }
	var runEnds []runEnd
	for _, s := range subs {
		if s.runID == "" {
			continue
		}
		rep.Runs++
		rl := st.runs[s.runID]
		if rl == nil {
			problem("run %s: no events", s.runID)
			continue
		}
		rep.Cells += rl.cells
		if rl.finished != 1 {
			problem("run %s: %d RunFinished events, want 1", s.runID, rl.finished)
		}
		if len(rl.byCell) != rl.cells {
			problem("run %s: %d cells in the log, %d planned", s.runID, len(rl.byCell), rl.cells)
		}
		re := runEnd{finished: rl.finishedAt}
		for _, c := range rl.byCell {
			if c.endAt.After(re.lastCell) {
				re.lastCell = c.endAt
			}
		}
		runEnds = append(runEnds, re)
		if !re.finished.IsZero() && !re.lastCell.IsZero() {
			lag := re.finished.Sub(re.lastCell)
			lags = append(lags, lag)
			if lag > rep.FinishLagMax {
				rep.FinishLagMax, rep.FinishLagRun = lag, s.runID
			}
			if lag > 2*r.cfg.AckWait+time.Minute {
				problem("run %s: RunFinished %.1f s after its last cell ended", s.runID, lag.Seconds())
			}
		}
		for id, c := range rl.byCell {
			switch {
			case c.terminal != 1:
				problem("run %s cell %s: %d terminal events in attempt %d, want 1", s.runID, id, c.terminal, c.attempt)
			case !c.verdict:
				problem("run %s cell %s: errored in its last attempt %d", s.runID, id, c.attempt)
			default:
				rep.Verdicts++
			}
			if c.verdicts > 1 {
				rep.ExtraVerdicts += c.verdicts - 1
			}
			if c.attempt > 1 {
				rep.Retried++
			}
			if !c.endAt.IsZero() {
				ends = append(ends, c.endAt)
				if !c.endAt.Before(ws) && !c.endAt.After(we) {
					rep.CellsInWindow++
				}
			}
			agentSum += c.agent
			if !c.firstLoad.IsZero() && !rl.planned.IsZero() {
				firstEvent = append(firstEvent, c.firstLoad.Sub(rl.planned))
			}
		}
		rows, err := artifactRows(s.artifact)
		if err != nil {
			problem("run %s: artifact: %v", s.runID, err)
			continue
		}
		once := map[string]int{}
		for _, row := range rows {
			once[row.CellID]++
		}
		if len(rows) != rl.cells || len(once) != rl.cells {
			problem("run %s: artifact has %d rows of %d cells, %d planned", s.runID, len(rows), len(once), rl.cells)
		} else {
			rep.RunsProjectedOnce++
		}
		if ref != nil {
			n, err := normalize(s.artifact, s.inputs)
			if err != nil {
				problem("run %s: %v", s.runID, err)
				continue
			}
			rep.ArtifactsCompared++
			if n.text == ref.text {
				rep.ArtifactsEqual++
			} else {
				problem("run %s: artifact differs from the single node's: %s", s.runID, firstDiff(n.text, ref.text))
			}
		}
	}
	if len(ends) > 0 {
		rep.AgentEventsPerCell = float64(agentSum) / float64(len(ends))
	}
	if w := we.Sub(ws); w > 0 {
		rep.CellsPerHour = float64(rep.CellsInWindow) / w.Hours()
	}
	if rep.CellsPerHour > 0 {
		rep.ControlPerThousand = rep.ControlCores / (rep.CellsPerHour / 1000)
	}
	claims, err := readClaims(r.logs, "w")
	if err != nil {
		problem("the workers' claim lines: %v", err)
	}
	queued := make([]time.Duration, len(claims))
	for i, c := range claims {
		queued[i] = c.queued
	}
	rep.Claims = len(claims)
	rep.DispatchP50 = percentile(queued, 0.5)
	rep.DispatchP99 = percentile(queued, 0.99)
	rep.DispatchMax = percentile(queued, 1)
	rep.FinishLagP50 = percentile(lags, 0.5)
	rep.FirstEventP50 = percentile(firstEvent, 0.5)
	rep.FirstEventP99 = percentile(firstEvent, 0.99)
	sort.Slice(ends, func(i, j int) bool { return ends[i].Before(ends[j]) })
	rep.BaselineGap = longestGap(ends, ws, ws.Add(min(we.Sub(ws), r.cfg.Duration/4)))
	for _, f := range faults {
		fr := FaultResult{What: f.what, At: f.kill.Sub(rep.Start)}
		if !f.ready.IsZero() {
			fr.Ready = f.ready.Sub(f.kill)
		}
		// The longest stretch without a cell ending, from the kill to
		// twice the workers' AckWait after the restart.
		to := f.ready.Add(2 * r.cfg.AckWait)
		if len(ends) > 0 && ends[len(ends)-1].Before(to) {
			to = ends[len(ends)-1]
		}
		fr.Stall = longestGap(ends, f.kill, to)
		// The runs whose last cell ended while the process was down (or
		// before it had caught up): how long after the kill their
		// RunFinished came.
		for _, re := range runEnds {
			if !re.lastCell.Before(f.kill) && !re.lastCell.After(f.ready) {
				fr.RunsWaiting++
				fr.Finish = max(fr.Finish, re.finished.Sub(f.kill))
			}
		}
		rep.Faults = append(rep.Faults, fr)
	}
}

// longestGap is the longest interval within [from, to] with no time of
// ts (sorted) in it.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	if !to.After(from) {
		return 0
	}
	prev, best := from, time.Duration(0)
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		best = max(best, t.Sub(prev))
		prev = t
	}
	return max(best, to.Sub(prev))
}
