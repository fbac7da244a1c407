package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// delegateTimes are the fixed durations of the delegated arms' timeouts.
// They are variables so the tests can shrink them (export_test.go); the
// rules they implement are stated where they are used.
var delegateTimes = struct {
	// harborGrace is what a timed-out harbor gets between SIGTERM and
	// SIGKILL of its process group, so it can remove its trial container
	// and image (PROCTOR_DELEGATE_GRACE_SEC overrides it).
	harborGrace time.Duration
	// benchOuterMargin is how long proctor lets bench run past its own
	// hard deadline (BENCHFLOW_ROLLOUT_HARD_DEADLINE) before killing it.
	benchOuterMargin time.Duration
	// benchKillGrace is the time between SIGTERM to bench's process group
	// and SIGKILL at that outer kill.
	benchKillGrace time.Duration
	// dockerCall bounds each docker CLI call the arms make.
	dockerCall time.Duration
}{harborGrace: 60 * time.Second, benchOuterMargin: 600 * time.Second, benchKillGrace: 15 * time.Second, dockerCall: 60 * time.Second}

// DelegateGrace is the time a timed-out harbor gets between SIGTERM and
// SIGKILL: 60 seconds, so Harbor can remove its trial container and image
// before its process group is killed. PROCTOR_DELEGATE_GRACE_SEC (seconds,
// > 0) overrides it.
func DelegateGrace() time.Duration {
	if s := os.Getenv("PROCTOR_DELEGATE_GRACE_SEC"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 {
			return seconds(v)
		}
	}
	return delegateTimes.harborGrace
}

// delegatedOracleAgent is the agent name under which Harbor and BenchFlow
// run the task's reference solution: rows of such an arm are setup checks.
const delegatedOracleAgent = "oracle"

// hostPlacement places a delegated tool on the host driver in cwd, with no
// network plan and no verifier phase: the tool runs its own.
func hostPlacement(env Env, cwd string, state any) Placement {
	return Placement{Driver: env.Host(), Spec: sandbox.Spec{RunID: env.RunID(), CellID: env.CellID()}, Workdir: cwd, State: state}
}

// delegatedRun is what running a delegated tool gave.
type delegatedRun struct {
	res    sandbox.ExecResult
	tail   string // the bounded tail of stdout and stderr
	stderr string // the last stderrKeep bytes of stderr
	head   string // the first stderrKeep bytes of stderr
}

const stderrKeep = 64 << 10

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.n {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.n:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// headBuffer keeps the first n bytes written to it.
type headBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func (b *headBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.n - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *headBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// runDelegated runs argv on the placement's host driver with the caller's
// environment plus extra, stdin closed, in its own process group: at
// timeout SIGTERM to the group, grace later SIGKILL (ExitCode 124,
// TimedOut); what is left of the group when the tool exits is killed by
// the driver. Stdout and stderr go to solve.log (tail in stdout.tail.txt);
// the head and tail of stderr are also kept for the reasons quoted from it.
func runDelegated(ctx context.Context, env Env, p Placement, h *sandbox.Handle, argv []string, extra map[string]string, timeout, grace time.Duration) (delegatedRun, error) {
	dir := env.Dir()
	out, err := dir.OpenCapture("solve.log")
	if err != nil {
		return delegatedRun{}, events.Classed(events.ClassInfra, err)
	}
	errTail, errHead := &tailBuffer{n: stderrKeep}, &headBuffer{n: stderrKeep}
	dir.Logf("delegated: %s (in %s, timeout %s, grace %s)", strings.Join(argv, " "), p.Workdir, timeout, grace)
	res, err := p.Driver.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: argv, Workdir: p.Workdir, Env: extra,
		Timeout: timeout, Grace: grace,
		Stdout: out, Stderr: multiWriter{out, errTail, errHead},
	})
	_ = out.Close(dir, "stdout.tail.txt")
	if err != nil {
		return delegatedRun{}, events.Classed(events.ClassSandbox, err)
	}
	return delegatedRun{res: res, tail: out.RowTail(), stderr: errTail.String(), head: errHead.String()}, nil
}

type multiWriter []interface{ Write([]byte) (int, error) }

func (m multiWriter) Write(p []byte) (int, error) {
	for _, w := range m {
		if _, err := w.Write(p); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// finished is the Finished data of a delegated run.
func (r delegatedRun) finished(tool string, cwd string) events.FinishedData {
	f := events.FinishedData{
		Reason: fmt.Sprintf("exit %d", r.res.ExitCode), ExitCode: r.res.ExitCode, TimedOut: r.res.TimedOut,
		DurationSec: round3(r.res.Duration.Seconds()), StdoutTail: r.tail, Synthesized: true,
		Isolation: map[string]any{"sandbox": "delegated to " + tool, "cwd": cwd},
	}
	if r.res.TimedOut {
		f.Reason = "timeout"
	}
	return f
}

// lastLine is the last non-empty line of s that matches keep (any line when
// keep is nil), trimmed and bounded, or "".
func lastLine(s string, keep func(string) bool) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && (keep == nil || keep(l)) {
			return cellfs.Suffix(l, 500)
		}
	}
	return ""
}

// rolloutDirs lists the directories two levels below jobs
// (<jobs>/<job>/<trial>) that hold a result.json, sorted: the trial
// (Harbor) or rollout (BenchFlow) directories of a run.
func rolloutDirs(jobs string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(jobs, "*", "*", "result.json"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			out = append(out, filepath.Dir(p))
		}
	}
	return out, nil
}

// maxResultBytes bounds a result.json or trajectory file read back.
const maxResultBytes = 32 << 20

func readBounded(p string) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(p))
	}
	if fi.Size() > maxResultBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d-byte limit", filepath.Base(p), fi.Size(), maxResultBytes)
	}
	return os.ReadFile(p)
}

// primaryReward is the reward of a rewards map as Harbor and BenchFlow
// write it: its "reward" key, or its only key. It must be a finite number
// in [0,1].
func primaryReward(rewards map[string]any) (float64, map[string]float64, error) {
	all := map[string]float64{}
	for k, v := range rewards {
		f, ok := v.(float64)
		if !ok {
			return 0, nil, fmt.Errorf("rewards[%q] is %v, not a number", k, v)
		}
		all[k] = f
	}
	var r float64
	switch v, ok := all["reward"]; {
	case ok:
		r = v
	case len(all) == 1:
		for _, v := range all {
			r = v
		}
	default:
		return 0, nil, fmt.Errorf("rewards %v has no reward key and more than one value", rewards)
	}
	if !(r >= 0 && r <= 1) {
		return 0, nil, fmt.Errorf("reward %v is not a number in [0,1]", r)
	}
	return r, all, nil
}

// scriptReadsMount matches a script that reads /verifier or /oracle: the
// in-container paths proctor copies the tests and the solution to but
// Harbor does not mount (it mounts /tests and /solution).
var scriptReadsMount = regexp.MustCompile(`(^|[^A-Za-z0-9_.-])/(verifier|oracle)([/"'\s;)|&]|$)`)

// jsonInt is a pointer to a JSON number field, nil when absent or null.
func jsonInt(v any) *int64 {
	if f, ok := v.(float64); ok && f >= 0 {
		n := int64(f)
		return &n
	}
	return nil
}

func jsonFloat(v any) *float64 {
	if f, ok := v.(float64); ok && f >= 0 {
		return &f
	}
	return nil
}

// isErrorless reports whether a result's error field is absent or null.
func isErrorless(v any) bool {
	s, ok := v.(string)
	return v == nil || (ok && strings.TrimSpace(s) == "")
}

var errNoState = errors.New("delegated arm: Solve without Prepare")

// dockerCLI runs the docker CLI (the one bench and harbor use, so the
// engine they talk to) with args, bounded by delegateTimes.dockerCall, and
// returns its trimmed stdout; the error carries its last stderr line.
func dockerCLI(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, delegateTimes.dockerCall)
	defer cancel()
	cmd := exec.CommandContext(cctx, "docker", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if l := lastLine(stderr.String(), nil); l != "" {
			err = fmt.Errorf("%w: %s", err, l)
		}
		return "", fmt.Errorf("docker %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Preflighter is an arm that checks, once per run and before anything
// starts, that the tools it delegates to are installed and can run here
// (BenchFlow arms: `bench`, `docker compose version`, no other BenchFlow
// sweep on the engine). Arms with equal PreflightKey share one check.
type Preflighter interface {
	PreflightKey() string
	Preflight(ctx context.Context) error
}

// Preflight runs the pre-flight of every arm among names that has one,
// once per PreflightKey, in the order given; the first failure is
// returned (one clear message: the run must not start). `--dry-run` does
// not call it.
func Preflight(ctx context.Context, names []string) error {
	done := map[string]bool{}
	for _, n := range names {
		a, err := Lookup(n)
		if err != nil {
			continue // the matrix reports it
		}
		p, ok := a.(Preflighter)
		if !ok || done[p.PreflightKey()] {
			continue
		}
		done[p.PreflightKey()] = true
		if err := p.Preflight(ctx); err != nil {
			return fmt.Errorf("harness %s: %w", n, err)
		}
	}
	return nil
}

// CoverageRefusers are the refusal columns of `tasks coverage`
// (task.Loader.Refusers): one per form of every registered harness kind
// (Registry's syntax, an optional part both without and with it; an alias
// left out) and per setup-check form of the delegated kinds
// (coverageExtraForms), each the arm's own Refusal so coverage and
// --dry-run agree. Reasons of class unresolved_env are left out: coverage
// lists those tasks on their own.
func CoverageRefusers() map[string]func(*task.Task) string {
	out := map[string]func(*task.Task) string{}
	for _, name := range coverageForms() {
		ref, err := Parse(placeholder.ReplaceAllString(name, "x"))
		if err != nil {
			panic(fmt.Sprintf("coverage column %s: %v", name, err)) // the registry's own forms
		}
		a, err := For(ref)
		if err != nil {
			panic(fmt.Sprintf("coverage column %s: %v", name, err))
		}
		out[name] = func(t *task.Task) string {
			if c, why := a.Refusal(t); c == events.ClassRefused {
				return why
			}
			return ""
		}
	}
	return out
}

// placeholder is a <name> of a Registry syntax.
var placeholder = regexp.MustCompile(`<[^>]+>`)

// coverageExtraForms are the forms whose arm refuses by other rules than
// its kind's other forms: the delegated kinds' oracle, a setup check.
var coverageExtraForms = []string{"terminal-bench:oracle", "benchflow:oracle"}

// coverageForms are Registry's syntaxes, "[...]" parts expanded (without,
// then with), aliases left out, then coverageExtraForms.
func coverageForms() []string {
	var out []string
	for _, in := range Registry() {
		if strings.HasPrefix(in.Description, "an alias of ") || !in.Available {
			continue
		}
		syn := in.Syntax
		if i := strings.Index(syn, "["); i >= 0 {
			out = append(out, syn[:i])
			syn = strings.NewReplacer("[", "", "]", "").Replace(syn)
		}
		out = append(out, syn)
	}
	return append(out, coverageExtraForms...)
}

func baseNames(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = filepath.Base(d)
	}
	sort.Strings(out)
	return out
}

func boundMsg(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
