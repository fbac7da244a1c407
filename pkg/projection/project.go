package projection

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Projector folds one run's events, in log order, into run state and the
// task_runs.v1 artifact. It dedupes events by id (a cell's ids only while
// its attempt runs), keeps only the last
// attempt of each cell (events of an older attempt are ignored, a newer
// attempt resets the cell), and depends on nothing but the events: the same
// log always projects to the same bytes. Not safe for concurrent use.
type Projector struct {
	runID      string
	seen       map[string]struct{}
	requested  *events.RunRequestedData
	startedAt  time.Time
	planned    *events.RunPlannedData
	finished   *events.RunFinishedData
	finishedAt time.Time
	// epoch is the newest RunResumed epoch seen (0: never resumed).
	epoch int
	// control is the state the RunControl events set; controls those
	// events in log order.
	control  bus.ControlState
	controls []ControlEvent
	cells    map[string]*cellState
	terminal int
	// mapRules are the image-map rules some image of the run used.
	mapRules map[string]bool
	// decodeErrs counts the events whose data did not decode, by type;
	// firstDecodeErr is the first one's error.
	decodeErrs     map[string]int
	decodeCount    int
	firstDecodeErr string
}

type cellState struct {
	plan   events.CellPlannedData
	planID string
	// seen holds the ids of the current attempt's events until it ends:
	// a duplicate of an event of an ended or superseded attempt is ignored
	// by the attempt rules anyway, so the dedupe set, and the projection's
	// memory, is bounded by the events of cells still running, not by the
	// log's length.
	seen     map[string]struct{}
	attempt  int
	first    time.Time
	last     time.Time
	terminal bool
	// active is set by the attempt's first event beside the preparation
	// events (Preparing): the cell is running, not waiting for a slot.
	active bool
	// attempts counts the attempts whose events the log holds and
	// retried the attempts that ended errored with a retryable class;
	// both survive reset. retrying marks a terminal attempt that a retry
	// follows (RunSpec.Retries not spent, or a RunResumed names the
	// cell): the cell is not done.
	attempts int
	retried  int
	retrying bool

	refused  *events.CellRefusedData
	errored  *events.CellErroredData
	verdict  *events.VerdictData
	finished *events.FinishedData
	image    *events.ImageBuiltData
	limits   *events.SandboxLimits
	// sandboxQueue is SandboxStarted's queue_sec: the wait for a sandbox
	// slot once the image was ready.
	sandboxQueue float64

	// Telemetry the agent reports: each sum is nil until an event reports
	// it (unreported is not 0); calls counts Usage events (their calls,
	// else 1 each) and is nil when there was none.
	prompt    *int64
	complete  *int64
	cacheRead *int64
	cacheWrit *int64
	calls     *int64
	cost      *float64
	tools     map[string]int
	ops       []map[string]any
	opsByType map[string]int
	egress    *artifact.EgressCounts
	egressSet map[string]map[string]bool // decision → "host:port" set
	// observed sums the cell's ModelCall events (nil: no gateway).
	observed *observedState
	denied   map[[2]string]int // (target, reason) → count

	// usagePartial is the reason of the first Usage marked partial ("":
	// none).
	usagePartial string

	// steps are a multi-step cell's StepVerdicts in log order; stepAt
	// the times of their StepStarted by index.
	steps  []events.StepVerdictData
	stepAt map[int]time.Time
	stepIn []time.Time

	// claim is the text of the agent's final message so far
	// (artifact.ClaimText): the last Message of role response, else the
	// last of role assistant (or no role), last by the event's time (a
	// publish retried after a server's loss lands later in the log than
	// the agent said it); claimResponse is set once a response was
	// seen, claimAt is the claim's event time.
	claim         string
	claimResponse bool
	claimAt       time.Time

	// decodeErr is the error of this attempt's first outcome event
	// (Verdict, CellErrored, CellRefused, Finished) whose data did not
	// decode: the row is errored (infra) with it.
	decodeErr string
}

// NewProjector returns an empty projector for one run.
func NewProjector(runID string) *Projector {
	return &Projector{runID: runID, seen: map[string]struct{}{}, cells: map[string]*cellState{}}
}

// Apply folds one event. Events of other runs are ignored.
func (p *Projector) Apply(e events.Envelope) {
	if e.RunID != p.runID {
		return
	}
	if e.CellID == "" {
		if _, dup := p.seen[e.ID]; dup {
			return
		}
		p.seen[e.ID] = struct{}{}
		p.applyRun(e)
		return
	}
	attempt := max(e.Attempt, 1) // an event without an attempt belongs to the first
	c := p.cells[e.CellID]
	if c == nil {
		c = &cellState{attempt: attempt, attempts: 1}
		p.cells[e.CellID] = c
	}
	if e.Type == events.CellPlanned {
		if e.ID == c.planID {
			return // a duplicate
		}
		c.planID = e.ID
		p.into(e, &c.plan)
		return
	}
	switch {
	case attempt < c.attempt:
		return // a superseded attempt's late event
	case attempt > c.attempt:
		p.reset(c, attempt)
	}
	if c.terminal {
		p.late(c, e) // the first terminal event of an attempt decides it
		return
	}
	if _, dup := c.seen[e.ID]; dup {
		return
	}
	if c.seen == nil {
		c.seen = map[string]struct{}{}
	}
	c.seen[e.ID] = struct{}{}
	if c.first.IsZero() || e.At.Before(c.first) {
		c.first = e.At
	}
	if !Preparing(e.Type) {
		c.active = true
	}
	if e.At.After(c.last) {
		c.last = e.At
	}
	// outcome decodes an event that decides the row's outcome; one that
	// does not decode makes the row errored rather than guessed.
	outcome := func(v any) {
		if err := p.into(e, v); err != nil && c.decodeErr == "" {
			c.decodeErr = err.Error()
		}
	}
	switch e.Type {
	case events.CellRefused:
		c.refused = new(events.CellRefusedData)
		outcome(c.refused)
	case events.CellErrored:
		c.errored = new(events.CellErroredData)
		outcome(c.errored)
	case events.Verdict:
		c.verdict = new(events.VerdictData)
		outcome(c.verdict)
	case events.Finished:
		c.finished = new(events.FinishedData)
		outcome(c.finished)
	case events.ImageBuilt:
		c.image = new(events.ImageBuiltData)
		p.into(e, c.image)
		// The cell's clock starts when its image phase did.
		if s := e.At.Add(-time.Duration(c.image.BuildSec * float64(time.Second))); s.Before(c.first) {
			c.first = s
		}
		for _, r := range c.image.ImageMapRules {
			if p.mapRules == nil {
				p.mapRules = map[string]bool{}
			}
			p.mapRules[r] = true
		}
	case events.StepStarted:
		var st events.StepStartedData
		p.into(e, &st)
		if c.stepAt == nil {
			c.stepAt = map[int]time.Time{}
		}
		c.stepAt[st.Index] = e.At
	case events.StepVerdict:
		var sv events.StepVerdictData
		if err := p.into(e, &sv); err == nil {
			c.steps = append(c.steps, sv)
			c.stepIn = append(c.stepIn, e.At)
		}
	case events.SandboxStarted:
		var sb events.SandboxStartedData
		p.into(e, &sb)
		c.limits = sb.Limits
		c.sandboxQueue = sb.QueueSec
		if sb.State["proxy"] != "" {
			c.noteEgress() // a cell behind a proxy has egress counts, 0 or not
		}
		if sb.State["gateway_ca"] != "" {
			c.noteObserved() // a cell behind a gateway has observed usage, 0 or not
		}
	case events.Usage:
		var u events.UsageData
		p.into(e, &u)
		c.prompt = addReported(c.prompt, u.PromptTokens)
		c.complete = addReported(c.complete, u.CompletionTokens)
		c.cacheRead = addReported(c.cacheRead, u.CacheReadTokens)
		c.cacheWrit = addReported(c.cacheWrit, u.CacheWriteTokens)
		c.calls = addReported(c.calls, cmp.Or(u.Calls, ptr(int64(1))))
		if u.CostUSD != nil {
			c.cost = ptr(deref(c.cost) + *u.CostUSD)
		}
		if u.Partial != "" && c.usagePartial == "" {
			c.usagePartial = u.Partial
		}
	case events.Message:
		var msg events.MessageData
		if p.into(e, &msg) == nil {
			c.noteMessage(msg, e.At)
		}
	case events.ToolCall:
		var t events.ToolCallData
		p.into(e, &t)
		if c.tools == nil {
			c.tools = map[string]int{}
		}
		c.tools[t.Name]++
	case events.Operation:
		var o events.OperationData
		p.into(e, &o)
		if c.opsByType == nil {
			c.opsByType = map[string]int{}
		}
		c.opsByType[o.OpType]++
		op := map[string]any{"op_type": o.OpType, "at": e.At.UTC().Format(time.RFC3339Nano)}
		maps.Copy(op, o.Fields)
		op["op_type"] = o.OpType
		c.ops = append(c.ops, op)
	case events.ModelCall:
		var mc events.ModelCallData
		if p.into(e, &mc) == nil {
			c.noteObserved()
			c.observed.add(mc)
		}
	case events.EgressDecision:
		var d events.EgressDecisionData
		p.into(e, &d)
		c.noteEgress()
		target := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
		kind := d.Decision
		if kind != "allowed" && kind != "denied" {
			kind = "error"
		}
		if c.egressSet[kind] == nil {
			c.egressSet[kind] = map[string]bool{}
		}
		c.egressSet[kind][target] = true
		if d.Closed {
			break // the close record of a decision already counted
		}
		switch kind {
		case "allowed":
			c.egress.Allowed++
		case "denied":
			c.egress.Denied++
			c.denied[[2]string{target, d.Reason}]++
		default:
			c.egress.Errors++
		}
	}
	if Terminal(e.Type) {
		if e.Type == events.CellErrored && c.errored != nil && events.ErrorClass(c.errored.ErrorClass).Retryable() {
			c.retried++
			c.retrying = c.retried <= p.Spec().Retries
		}
		p.end(c)
	}
}

// late folds an event of an attempt that already has its terminal event:
// a publish that failed and was published again after it (Bus.Flush). It
// never changes the outcome (the first terminal event decides it), but a
// late Started widens the cell's time span and a late Finished,
// ImageBuilt or SandboxStarted fills what the row would lack (solve
// timings, exit code, build time, limits), each once per attempt, so the
// row depends only on the events of the log, not on their order. Counted
// telemetry (Usage, ToolCall, Operation, EgressDecision, StepVerdict)
// arriving late is not folded: the ids that would de-duplicate it are not
// kept past the terminal event, so the projection's memory stays bounded
// by the cells still running.
func (p *Projector) late(c *cellState, e events.Envelope) {
	if Terminal(e.Type) {
		return
	}
	switch e.Type {
	case events.Started, events.Finished, events.ImageBuilt, events.SandboxStarted, events.VerifyStarted:
	default:
		return
	}
	if !e.At.IsZero() && e.At.Before(c.first) {
		c.first = e.At
	}
	switch e.Type {
	case events.Finished:
		if c.finished == nil {
			f := new(events.FinishedData)
			if p.into(e, f) == nil {
				c.finished = f
			}
		}
	case events.ImageBuilt:
		if c.image == nil {
			im := new(events.ImageBuiltData)
			if p.into(e, im) == nil {
				c.image = im
				if s := e.At.Add(-time.Duration(im.BuildSec * float64(time.Second))); s.Before(c.first) {
					c.first = s
				}
				for _, r := range im.ImageMapRules {
					if p.mapRules == nil {
						p.mapRules = map[string]bool{}
					}
					p.mapRules[r] = true
				}
			}
		}
	case events.SandboxStarted:
		if c.limits == nil {
			var sb events.SandboxStartedData
			if p.into(e, &sb) == nil {
				c.limits = sb.Limits
			}
		}
	}
}

func (p *Projector) applyRun(e events.Envelope) {
	switch e.Type {
	case events.RunRequested:
		if p.requested == nil {
			p.requested = new(events.RunRequestedData)
			p.into(e, p.requested)
			p.startedAt = e.At
		}
	case events.RunPlanned:
		if p.planned == nil {
			p.planned = new(events.RunPlannedData)
			if err := p.into(e, p.planned); err != nil && p.planned.Error == "" {
				// Without its cell count the run cannot be closed as
				// complete: it fails, naming the event.
				p.planned.Error = err.Error()
			}
		}
	case events.RunFinished:
		if p.finished == nil {
			f := new(events.RunFinishedData)
			p.into(e, f)
			if f.Epoch < p.epoch {
				return // a late close of the run before its resume
			}
			p.finished, p.finishedAt = f, e.At
		}
	case events.RunControl:
		p.applyControl(e)
	case events.RunResumed:
		var r events.RunResumedData
		if p.into(e, &r) == nil && r.Epoch > p.epoch {
			p.epoch = r.Epoch
			if p.requested != nil {
				p.requested.Spec.OutJSON = cmp.Or(r.OutJSON, p.requested.Spec.OutJSON)
				p.requested.Spec.OutMD = cmp.Or(r.OutMD, p.requested.Spec.OutMD)
			}
			if p.finished != nil && p.finished.Epoch < r.Epoch {
				p.finished, p.finishedAt = nil, time.Time{}
			}
			// The cells it names run again: one whose attempt ended
			// (errored by proctor's machinery) is pending its new
			// attempt, as a retried cell is, and not done.
			for _, id := range r.Cells {
				if c := p.cells[id]; c != nil && c.terminal && !c.retrying {
					c.retrying = true
					p.terminal--
				}
			}
		}
	}
}

// into decodes e's data into v (events.Into); an error is counted, by
// event type, and returned.
func (p *Projector) into(e events.Envelope, v any) error {
	err := events.Into(e, v)
	if err != nil {
		if p.decodeErrs == nil {
			p.decodeErrs = map[string]int{}
			p.firstDecodeErr = err.Error()
		}
		p.decodeErrs[string(e.Type)]++
		p.decodeCount++
	}
	return err
}

// DecodeErrors counts the events folded so far whose data did not decode
// (see artifact.DecodeErrors); nil when every event decoded.
func (p *Projector) DecodeErrors() *artifact.DecodeErrors {
	if p.decodeCount == 0 {
		return nil
	}
	return &artifact.DecodeErrors{Count: p.decodeCount, ByType: maps.Clone(p.decodeErrs), First: p.firstDecodeErr}
}

func (p *Projector) reset(c *cellState, attempt int) {
	if c.terminal && !c.retrying {
		p.terminal--
	}
	*c = cellState{plan: c.plan, planID: c.planID, attempt: attempt, attempts: c.attempts + 1, retried: c.retried}
}

// Preparing reports whether an event of type t only prepares a cell's
// attempt (CellSuperseded, ImageBuilt): a cell with no other event of its
// attempt is queued (its image built, it waits for a slot or for a paused
// run to continue), not running. The launcher records SandboxStarted once
// the cell holds its solve slot, so that event makes it running.
func Preparing(t events.Type) bool {
	return t == events.CellSuperseded || t == events.ImageBuilt
}

// Terminal reports whether an event of type t ends a cell's attempt:
// Verdict, CellErrored or CellRefused. This is the one notion of "cell
// done" (Projector.CellDone, the aggregator's closing of a run, progress
// lines): the first terminal event of a cell's current attempt decides
// it, and a later attempt (a redelivered launch job, announced by
// CellSuperseded) starts the cell again, so the last attempt wins.
func Terminal(t events.Type) bool {
	return t == events.Verdict || t == events.CellErrored || t == events.CellRefused
}

// Attempt is the cell's current attempt (0 for a cell the log does not
// hold).
func (p *Projector) Attempt(cellID string) int {
	if c := p.cells[cellID]; c != nil {
		return c.attempt
	}
	return 0
}

// CellDone reports whether the cell's current attempt has its terminal
// event (see Terminal), planned or not, and no retry follows it (see
// RetryPending).
func (p *Projector) CellDone(cellID string) bool {
	c := p.cells[cellID]
	return c != nil && c.terminal && !c.retrying
}

// RetryPending reports whether the cell's current attempt ended errored
// with a retryable class (events.ErrorClass.Retryable) while the run's
// RunSpec.Retries was not spent: the cell is run again as a new attempt
// (the aggregator publishes its launch job) and is not done. The k-th
// such error of a cell is retried when k <= Retries. A cell a RunResumed
// names is pending too (the resume publishes its job).
func (p *Projector) RetryPending(cellID string) bool {
	c := p.cells[cellID]
	return c != nil && c.terminal && c.retrying
}

// DoneCells is the number of cells whose current attempt has its
// terminal event.
func (p *Projector) DoneCells() int { return p.terminal }

// settled reports whether c's row is final as far as the log goes: it has
// its terminal event and no retry follows, or the run finished (then a
// cell without one is an errored row). A cell pending a retry shows as
// running.
func (p *Projector) settled(c *cellState) bool {
	return c.terminal && !c.retrying || p.finished != nil
}

func (p *Projector) end(c *cellState) {
	c.terminal = true
	c.seen = nil
	if !c.retrying {
		p.terminal++
	}
}

// Planned reports whether the run's RunPlanned event was seen.
func (p *Projector) Planned() bool { return p.planned != nil }

// Done reports whether every planned cell has its terminal event (or
// planning failed).
func (p *Projector) Done() bool {
	return p.planned != nil && (p.planned.Error != "" || p.terminal >= p.planned.Cells)
}

// Epoch is the newest epoch a RunResumed event of the run gave (0: never
// resumed).
func (p *Projector) Epoch() int { return p.epoch }

// Finished reports whether the run's RunFinished event was seen (one of
// the newest epoch: a RunResumed reopens a finished run).
func (p *Projector) Finished() bool { return p.finished != nil }

// Spec is the run's spec (zero before RunRequested).
func (p *Projector) Spec() events.RunSpec {
	if p.requested == nil {
		return events.RunSpec{}
	}
	return p.requested.Spec
}

// PlanError is the planning error of a run that could not be planned.
func (p *Projector) PlanError() string {
	if p.planned == nil {
		return ""
	}
	return p.planned.Error
}

// UnusedImageMapRules returns the `from` of every rule of the run's image
// map that no image of the run used so far (no ImageBuilt event, failed
// builds included, names it), sorted; nil without an image map.
func (p *Projector) UnusedImageMapRules() []string {
	var out []string
	for _, from := range slices.Sorted(maps.Keys(p.Spec().ImageMap)) {
		if !p.mapRules[from] {
			out = append(out, from)
		}
	}
	return out
}

// Counts returns the number of cells by outcome so far.
func (p *Projector) Counts() map[string]int {
	out := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(p.cells)) {
		out[p.row(id).Outcome]++
	}
	return out
}

// Artifact projects the run. Cells without a terminal event are errored
// rows (class infra): missing data, never a 0 and never a pass. Which
// harnesses are setup checks (never compared) is what the log says
// (BuildOptions).
func (p *Projector) Artifact(version string) *artifact.Artifact {
	run, rows := p.Input(version)
	return artifact.Build(run, rows, p.BuildOptions())
}

// BuildOptions are the options the run's artifact is built with: the
// harnesses whose CellPlanned says setup_check (the arms' word when the
// run was planned) are setup checks. A log that predates the key has
// none. The options hold a copy: they stay valid after the next Apply.
func (p *Projector) BuildOptions() artifact.BuildOptions {
	checks := map[string]bool{}
	for _, c := range p.cells {
		if c.plan.SetupCheck {
			checks[c.plan.Harness] = true
		}
	}
	return artifact.BuildOptions{Compare: artifact.CompareOptions{SetupCheck: func(h string) bool { return checks[h] }}}
}

// Input returns what Artifact builds the artifact from: the run's info and
// its rows in cell id order. The rows share maps with the projection, so
// they are valid until the next Apply.
func (p *Projector) Input(version string) (artifact.RunInfo, []artifact.Result) {
	spec := p.Spec()
	run := artifact.RunInfo{
		ID: p.runID, TasksRoot: spec.TasksRoot, Harnesses: spec.Harnesses, Models: spec.Models,
		Repeats: max(spec.Repeats, 1), BaselineHarness: spec.BaselineHarness, ImageMap: spec.ImageMap,
		AgentUser: spec.AgentUser, ProctorVersion: version,
	}
	if p.requested != nil && p.requested.ProctorVersion != "" {
		run.ProctorVersion = p.requested.ProctorVersion
	}
	if !p.startedAt.IsZero() {
		run.StartedAt = p.startedAt.UTC().Format(time.RFC3339Nano)
	}
	if !p.finishedAt.IsZero() {
		run.FinishedAt = p.finishedAt.UTC().Format(time.RFC3339Nano)
	}
	run.ImageMapUnused = p.UnusedImageMapRules()
	run.DecodeErrors = p.DecodeErrors()
	var rows []artifact.Result
	for _, id := range slices.Sorted(maps.Keys(p.cells)) {
		if p.cells[id].plan.Task == "" {
			continue // events of a cell whose CellPlanned is missing
		}
		rows = append(rows, p.row(id))
	}
	return run, rows
}

func (p *Projector) row(id string) artifact.Result {
	c := p.cells[id]
	r := artifact.Result{
		CellID: id, Task: c.plan.Task, Harness: c.plan.Harness, HarnessKind: harnessKind(c.plan), Model: c.plan.Model, Repeat: c.plan.Repeat,
		Attempt: c.attempt, Attempts: c.attempts, TaskRevision: c.plan.TaskRevision, OutputDir: c.plan.OutputDir, TaskMeta: c.plan.TaskMeta,
	}
	if !c.first.IsZero() {
		// A cell's own time: the waits for a sandbox and a solve slot,
		// which come after its image phase, are queue_sec, apart.
		r.ElapsedSec = round3(max(c.last.Sub(c.first).Seconds()-c.sandboxQueue-c.finishedQueue(), 0))
	}
	if r.Attempts < 2 {
		r.Attempts = 0 // one attempt: the field is omitted
	}
	m := &r.Metrics
	m.UnknownKeys = c.plan.UnknownKeys
	// Unreported is not 0 (docs/decisions/2026-12-01-unreported-is-not-zero.md): a count no event reported stays
	// null; total_tokens needs both of its parts.
	m.PromptTokens, m.CompletionTokens = c.prompt, c.complete
	if c.prompt != nil && c.complete != nil {
		m.TotalTokens = ptr(*c.prompt + *c.complete)
	}
	m.CacheReadTokens, m.CacheWriteTokens = c.cacheRead, c.cacheWrit
	m.NCalls = c.calls
	m.UsagePartial, m.UsagePartialReason = c.usagePartial != "", c.usagePartial
	if c.cost != nil {
		m.CostUSD = ptr(math.Round(*c.cost*1e9) / 1e9) // a sum of floats, to the nano-dollar
	}
	m.ToolCalls = c.tools
	m.OperationCount = len(c.ops)
	m.OperationsByType = c.opsByType
	m.Egress = c.egressCounts()
	m.UsageObserved = c.observed.usage(m)
	r.Operations = c.ops
	if c.image != nil {
		m.BuildSec = ptr(c.image.BuildSec)
		if c.image.QueueSec > 0 {
			m.QueueSec = ptr(c.image.QueueSec)
		}
	}
	if q := c.sandboxQueue + c.finishedQueue(); q > 0 {
		m.QueueSec = ptr(round3(q + deref0(m.QueueSec)))
	}
	if f := c.finished; f != nil {
		r.ReturnCode = ptr(f.ExitCode)
		r.StdoutTail = f.StdoutTail
		m.SolverTimeout = f.TimedOut
		m.SolveSec = ptr(f.DurationSec)
		m.AgentReported = f.AgentReported
		m.Isolation = f.Isolation
		m.IsolationProbe = f.IsolationProbe
		if f.Treatment != nil {
			m.Treatment = &artifact.Treatment{Skill: f.Treatment.Skill, NoticeVersion: f.Treatment.NoticeVersion}
		}
		for _, tf := range f.TamperFindings {
			m.TamperFindings = append(m.TamperFindings, artifact.TamperFinding(tf))
		}
		m.LongLines, m.ResponseTruncated = f.LongLines, f.ResponseTruncated
		if f.WorkTree != nil {
			wt := artifact.WorkTree(*f.WorkTree)
			m.WorkTree = &wt
		}
		if f.Recompile != nil {
			rc := artifact.Recompile(*f.Recompile)
			m.Recompile, m.RecompileFailed = &rc, rc.Failed
		}
		// Low-fidelity operations (free-text lines) are kept apart from
		// the structured Operation events in every total.
		for _, n := range f.LowFidelityOps {
			m.LowFidelityOperationCount += n
		}
		if m.LowFidelityOperationCount > 0 {
			m.LowFidelityOperationsByType = f.LowFidelityOps
		}
		// metrics.json fills a count only when no event carried it; a
		// reported 0 is 0.
		if n, ok := f.AgentReported["toolCallCount"].(float64); ok && n >= 0 && len(m.ToolCalls) == 0 {
			m.ToolCalls = map[string]int{"unnamed": int(n)}
		}
	}
	r.AgentClaim = artifact.NewAgentClaim(c.claim, m.AgentReported)
	if v := c.verdict; v != nil {
		r.VerifierReturnCode = v.ReturnCode
		r.VerifierTail = v.StdoutTail
		m.VerifySec = ptr(v.DurationSec)
		m.VerifierLeftoverProcesses = v.LeftoverProcesses
		for _, vf := range v.Findings {
			m.VerifierFindings = append(m.VerifierFindings, artifact.VerifierFinding(vf))
		}
	}
	errored := func(class, msg string) {
		r.Outcome, r.ErrorClass, r.Error = artifact.OutcomeErrored, class, msg
		r.Passed, r.Reward, r.Rewards = false, nil, nil
		m.Error = true
	}
	switch {
	case c.decodeErr != "":
		errored(artifact.ErrorInfra, c.decodeErr)
	case c.refused != nil:
		errored(c.refused.ErrorClass, c.refused.Reason)
		m.UnresolvedEnv = c.refused.UnresolvedEnv
		r.OutputDir = "" // refused before launch: nothing was written
	case c.errored != nil && c.errored.ErrorClass == artifact.ErrorSolver:
		errored(artifact.ErrorSolver, c.errored.Error) // e.g. the agent's install failed
		m.Error, m.SolverError = false, true
	case c.errored != nil:
		errored(c.errored.ErrorClass, c.errored.Error)
	case c.finished != nil && c.finished.NoAttempt:
		errored(artifact.ErrorSolver, "the solver made no attempt: "+c.finished.Reason)
		m.Error, m.SolverError = false, true
	case c.verdict != nil && c.verdict.TimedOut:
		r.Outcome, r.Reward = artifact.OutcomeVerifierTimeout, ptr(0.0)
		r.Rewards = map[string]float64{"reward": 0}
		m.VerifierTimeout = true
	case c.verdict != nil && c.verdict.Reward == nil:
		r.Outcome, r.Error = artifact.OutcomeVerifierError, c.verdict.Error
		if c.verdict.RawReward != "" {
			// Quoted Go-style, so raw bytes (a NUL, invalid UTF-8, a
			// trailing newline) are visible and never reach a reader raw.
			r.Error += " (raw: " + strconv.Quote(c.verdict.RawReward) + ")"
		}
		m.Error = true
	case c.verdict != nil:
		rw := *c.verdict.Reward
		r.Reward, r.Rewards = ptr(rw), c.verdict.Rewards
		switch {
		case c.finished != nil && c.finished.TimedOut:
			r.Outcome = artifact.OutcomeSolverTimeout // a miss, whatever the files say
		case rw >= 1:
			r.Outcome, r.Passed = artifact.OutcomePassed, true
		case rw > 0:
			r.Outcome = artifact.OutcomePartial
		default:
			r.Outcome = artifact.OutcomeFailed
		}
	default:
		errored(artifact.ErrorInfra, "no verdict: the run ended before this cell finished")
	}
	for i, sv := range c.steps {
		r.Steps = append(r.Steps, stepRow(sv, c.stepAt, c.stepIn[i]))
		// A step's findings are the row's, named by the step.
		if sv.Verdict != nil {
			for _, vf := range sv.Verdict.Findings {
				m.VerifierFindings = append(m.VerifierFindings, artifact.VerifierFinding{Kind: vf.Kind, Detail: "step " + sv.Name + ": " + vf.Detail})
			}
		}
		if sv.Solve != nil {
			for _, tf := range sv.Solve.TamperFindings {
				m.TamperFindings = append(m.TamperFindings, artifact.TamperFinding(tf))
			}
		}
	}
	if c.limits != nil {
		l := artifact.Limits(*c.limits)
		m.Limits = &l
	}
	switch {
	case c.finished != nil && c.finished.OOMKilled:
		m.OOMKilled, m.OOMPhase = true, "solve"
	case c.verdict != nil && c.verdict.OOMKilled:
		m.OOMKilled, m.OOMPhase = true, "verify"
	}
	if m.OOMKilled {
		// The cause is kept beside the verifier's outcome (docs/decisions/2026-12-01-oom-kills-counted.md).
		msg := "OOM-killed during the " + m.OOMPhase
		if m.Limits != nil && m.Limits.MemoryMB > 0 {
			msg += fmt.Sprintf(" at the memory limit of %d MiB (%s)", m.Limits.MemoryMB, m.Limits.MemorySource)
		}
		if r.Error != "" {
			msg = r.Error + "; " + msg
		}
		r.Error = msg
	}
	return r
}

// stepRow is one steps[] entry: the step's outcome by the same rules as
// a cell's (a solve timeout is a miss, no reward is verifier_error), or
// skipped.
func stepRow(sv events.StepVerdictData, startedAt map[int]time.Time, at time.Time) artifact.StepResult {
	s := artifact.StepResult{Index: sv.Index, Name: sv.Name, Error: sv.Error, Stop: sv.Stop}
	if sv.Skipped {
		s.Outcome, s.Error = artifact.OutcomeSkipped, sv.SkipReason
		return s
	}
	if t, ok := startedAt[sv.Index]; ok && !at.Before(t) {
		s.ElapsedSec = ptr(round3(at.Sub(t).Seconds()))
	}
	if f := sv.Solve; f != nil {
		s.ReturnCode, s.SolveSec = ptr(f.ExitCode), ptr(f.DurationSec)
	}
	v := sv.Verdict
	if v != nil {
		s.VerifierReturnCode, s.VerifySec = v.ReturnCode, ptr(v.DurationSec)
	}
	switch {
	case v == nil || v.Reward == nil:
		s.Outcome = artifact.OutcomeVerifierError
		if v != nil && s.Error == "" {
			s.Error = v.Error
		}
	case v.TimedOut:
		s.Outcome, s.Reward, s.Rewards = artifact.OutcomeVerifierTimeout, ptr(0.0), v.Rewards
	default:
		s.Reward, s.Rewards = ptr(*v.Reward), v.Rewards
		switch rw := *v.Reward; {
		case sv.Solve != nil && sv.Solve.TimedOut:
			s.Outcome = artifact.OutcomeSolverTimeout
		case rw >= 1:
			s.Outcome = artifact.OutcomePassed
		case rw > 0:
			s.Outcome = artifact.OutcomePartial
		default:
			s.Outcome = artifact.OutcomeFailed
		}
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// finishedQueue is the wait for a solve slot Finished records (0 without
// Finished).
func (c *cellState) finishedQueue() float64 {
	if c.finished == nil {
		return 0
	}
	return c.finished.QueueSec
}

// deref0 is *p, or 0 for nil.
func deref0(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// addReported adds v to sum when v was reported; sum stays nil until then.
func addReported(sum, v *int64) *int64 {
	if v == nil {
		return sum
	}
	if sum == nil {
		return ptr(*v)
	}
	return ptr(*sum + *v)
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// observedState sums a cell's model calls (metrics.usage_observed).
type observedState struct {
	u      artifact.UsageObserved
	cost   float64
	noCost string // why the cost is null ("" priced)
	models map[string]bool
}

func (c *cellState) noteObserved() {
	if c.observed == nil {
		c.observed = &observedState{models: map[string]bool{}}
	}
}

// add folds one call: its tokens, its cost, and why the cell's cost is
// null when an answered call has no price.
func (o *observedState) add(mc events.ModelCallData) {
	o.u.Requests++
	n := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	if mc.InputTokens == nil && mc.OutputTokens == nil && mc.CacheReadTokens == nil && mc.CacheWriteTokens == nil {
		o.u.CallsWithoutUsage++
	}
	o.u.InputTokens += n(mc.InputTokens)
	o.u.OutputTokens += n(mc.OutputTokens)
	o.u.CacheReadTokens += n(mc.CacheReadTokens)
	o.u.CacheWriteTokens += n(mc.CacheWriteTokens)
	if mc.Model != "" {
		o.models[mc.Model] = true
	}
	if mc.PriceTable != "" {
		o.u.PriceTable = mc.PriceTable
	}
	switch {
	case mc.CostUSD != nil:
		o.cost += *mc.CostUSD
	case mc.API != "" && mc.Status >= 200 && mc.Status < 300 && o.noCost == "":
		// An answered call of a priced API without a price: the cell's
		// observed cost is unknown, never a silent 0.
		o.noCost = fmt.Sprintf("%s %s answered without a price: %s", mc.Method, mc.Path, cmp.Or(mc.CostNote, "not priced"))
	}
}

// usage returns the row's metrics.usage_observed (nil without a gateway),
// comparing it with the agent's own figures in m.
func (o *observedState) usage(m *artifact.Metrics) *artifact.UsageObserved {
	if o == nil {
		return nil
	}
	u := o.u
	u.Models = sortedKeys(o.models)
	if o.noCost != "" {
		u.CostNullReason = o.noCost
	} else {
		u.CostUSD = ptr(math.Round(o.cost*1e9) / 1e9)
	}
	var reported int64
	hasReported := false
	for _, p := range []*int64{m.PromptTokens, m.CompletionTokens, m.CacheReadTokens, m.CacheWriteTokens} {
		if p != nil {
			reported += *p
			hasReported = true
		}
	}
	if hasReported {
		obs := u.TotalTokens()
		diff := reported - obs
		if diff < 0 {
			diff = -diff
		}
		u.ReportedDiffers = ptr(float64(diff) > 0.01*float64(obs))
	}
	return &u
}

// noteMessage keeps the text of the agent's final message (the row's
// agent_claim): a response (the end of an agent's response text, the
// Claude CLI's result) wins over the assistant's messages; of each, the
// last by the event's time at (of equal times, the last in the log), so
// the claim does not depend on the order publishes reached the log.
func (c *cellState) noteMessage(m events.MessageData, at time.Time) {
	switch {
	case m.Role == "response" && (!c.claimResponse || !at.Before(c.claimAt)):
		c.claim, c.claimResponse, c.claimAt = artifact.ClaimText(m.Text), true, at
	case (m.Role == "assistant" || m.Role == "") && !c.claimResponse && !at.Before(c.claimAt):
		c.claim, c.claimAt = artifact.ClaimText(m.Text), at
	}
}

// noteEgress makes the cell's egress counts exist.
func (c *cellState) noteEgress() {
	if c.egress == nil {
		c.egress = &artifact.EgressCounts{}
		c.egressSet = map[string]map[string]bool{}
		c.denied = map[[2]string]int{}
	}
}

// egressCounts returns the row's metrics.egress: the counts with the
// sorted host sets and denied entries; nil for a cell without a proxy.
func (c *cellState) egressCounts() *artifact.EgressCounts {
	if c.egress == nil {
		return nil
	}
	e := *c.egress
	e.AllowedHosts = sortedKeys(c.egressSet["allowed"])
	e.DeniedHosts = sortedKeys(c.egressSet["denied"])
	e.ErrorHosts = sortedKeys(c.egressSet["error"])
	e.DeniedEntries = []artifact.DeniedEntry{}
	for k, n := range c.denied {
		e.DeniedEntries = append(e.DeniedEntries, artifact.DeniedEntry{Target: k[0], Reason: k[1], Count: n})
	}
	sort.Slice(e.DeniedEntries, func(i, j int) bool {
		a, b := e.DeniedEntries[i], e.DeniedEntries[j]
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		return a.Reason < b.Reason
	})
	return &e
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// harnessKind is a row's harness_kind: the planner's (CellPlanned), else,
// in a log written before the planner recorded it, the part of the
// harness before its first ":".
func harnessKind(p events.CellPlannedData) string {
	if p.HarnessKind != "" {
		return p.HarnessKind
	}
	kind, _, _ := strings.Cut(p.Harness, ":")
	return kind
}
