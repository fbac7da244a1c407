// Package verify runs a task's tests in a solved sandbox and reads the
// reward, with the integrity rules of DESIGN §4 and docs/THREATS.md: the
// tests copied in fresh, /logs/verifier made anew, a BASH_ENV exit hook
// that stops every process at the script's exit, the sandbox frozen before
// the reward is read, and reward files read from the engine's copy stream
// (never through a path on the host). The verifier service and the
// launcher's multi-step loop both score through it.
package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// exitHook is sourced by the test script's bash before the script runs
// (through BASH_ENV, which it then unsets so no other bash sources it): at
// the script's exit it stops (SIGSTOP) every other process in the
// container but PID 1, within the script's own exit, before the engine
// could be asked to freeze. A process the test started (an agent's code
// run as root) that would write the reward after the script's last write
// is stopped before it can. A script that sets its own EXIT trap or execs
// another program replaces the hook; Freeze, right after the exec ends,
// still stops everything before the reward is read. A task whose
// [verifier.env] sets BASH_ENV keeps its own and has only Freeze.
const exitHook = "unset BASH_ENV\ntrap 'kill -STOP -1 2>/dev/null' EXIT\n"

// exitHookPath is where the verifier's exec writes exitHook, fresh, before
// the script starts.
const exitHookPath = "/.proctor-verifier-exit.sh"

// TestSpec is what one verifier run needs of its task: the tests
// directories copied to /tests and /verifier in order (a later one's files
// win over an earlier one's, as Harbor uploads a step's tests/ over the
// task-level tests/), the test script's base name, the literal env and the
// budget in seconds.
type TestSpec struct {
	TestsDirs  []string
	Script     string
	Env        map[string]string
	TimeoutSec float64
	// Log names the capture file of the script's output in the cell
	// directory ("verifier.log" when "").
	Log string
	// Network is the sandbox's network during the run; on
	// sandbox.NetworkBridge the script gets the host's proxy variables
	// without their credentials.
	Network string
	// Getenv reads those proxy variables from proctor's environment
	// (nil: os.Getenv).
	Getenv func(string) string
}

// TaskTests is the TestSpec of a single-step task.
func TaskTests(t *task.Task) TestSpec {
	return TestSpec{TestsDirs: []string{t.TestsDir}, Script: filepath.Base(t.TestScript), Env: t.VerifierEnv, TimeoutSec: t.VerifierTimeoutSec}
}

// RunTests copies the tests to /tests and /verifier, creates
// /logs/verifier fresh (nothing a solver wrote there counts), runs
// `bash /tests/<script>` as root with the spec's timeout and literal env,
// freezes the sandbox when the script has ended (every process left is
// stopped and counted in LeftoverProcesses), copies /logs out into dir and
// reads the reward from the frozen sandbox. The script's exit code is
// recorded but does not decide the reward (as in Harbor). A timeout is
// reward 0 with TimedOut set, not an error. driver needs sandbox.Freezer
// and sandbox.FileCopier; without them the error says so.
func RunTests(ctx context.Context, driver sandbox.Driver, spec TestSpec, h *sandbox.Handle, dir cellfs.Dir) (events.VerdictData, error) {
	var v events.VerdictData
	freezer, ok := driver.(sandbox.Freezer)
	if !ok {
		return v, fmt.Errorf("the sandbox driver %T cannot freeze a sandbox before its reward is read", driver)
	}
	stage := harness.StagePath("tests")
	dirs := 0
	for _, td := range spec.TestsDirs {
		if td == "" {
			continue
		}
		// Each directory's contents land in the one stage, the later
		// ones over the earlier ones.
		if err := driver.CopyIn(ctx, h, td, stage); err != nil {
			return v, fmt.Errorf("copy tests in: %w", err)
		}
		dirs++
	}
	if dirs == 0 {
		return v, errors.New("no tests directory to copy in")
	}
	logName := spec.Log
	if logName == "" {
		logName = "verifier.log"
	}
	out, err := dir.OpenCapture(logName)
	if err != nil {
		return v, err
	}
	dir.Logf("verify: bash /tests/%s (timeout %gs)", spec.Script, spec.TimeoutSec)
	// One exec: a fresh /logs/verifier (nothing a solver wrote there
	// counts), fresh /tests and /verifier (nothing planted beside the
	// tests), then the test script.
	env := maps.Clone(spec.Env)
	if _, ok := env["BASH_ENV"]; !ok {
		if env == nil {
			env = map[string]string{}
		}
		env["BASH_ENV"] = exitHookPath
	}
	if spec.Network == sandbox.NetworkBridge {
		// A public verifier gets the host's proxy variables, without
		// their credentials (the task's own variables win).
		getenv := spec.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		for k, v := range sandbox.HostProxyEnv(getenv) {
			if _, ok := env[k]; !ok {
				env[k] = v
			}
		}
	}
	res, err := driver.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: harness.PlaceAndRun(stage, []string{"/tests", "/verifier"},
			[]string{"/logs/verifier", "/tests", "/verifier", exitHookPath}, []string{"/logs/verifier", "/logs/agent", "/logs/artifacts"},
			[]string{"sh", "-c", `printf '%s' "$1" > "$2" && exec bash "$3"`, "sh", exitHook, exitHookPath, "/tests/" + spec.Script}),
		Env:     env,
		Timeout: time.Duration(spec.TimeoutSec * float64(time.Second)), Grace: time.Second,
		Stdout: out, Stderr: out,
	})
	_ = out.Close(dir, "")
	if err != nil {
		return v, fmt.Errorf("run test.sh: %w", err)
	}
	// Nothing runs after the test script: a process it started (an
	// agent's code run as root, a daemon of the test) is frozen before the
	// reward files are read, so the reward is what the script left.
	alive, err := freezer.Freeze(ctx, h)
	if err != nil {
		return v, fmt.Errorf("freeze the sandbox before reading the reward: %w", err)
	}
	v.LeftoverProcesses = &alive
	if alive > 0 {
		dir.Logf("verify: %d processes still alive when the test script ended (frozen before the reward was read)", alive)
	}
	rc := res.ExitCode
	v.ReturnCode = &rc
	if rc == harness.PrepExitCode && strings.Contains(out.Tail.String(), "proctor: ") {
		return v, fmt.Errorf("prepare the verifier: %s", strings.TrimSpace(cellfs.Suffix(out.Tail.String(), 300)))
	}
	v.DurationSec = float64(res.Duration.Milliseconds()) / 1000
	v.StdoutTail = out.RowTail()
	files, copyErr := copyLogs(ctx, driver, h, dir)
	if res.TimedOut {
		zero := 0.0
		v.Reward, v.TimedOut = &zero, true
		v.Rewards = map[string]float64{"reward": 0}
		dir.Logf("verifier timed out after %.3fs: reward 0", v.DurationSec)
		return v, nil
	}
	if copyErr != nil {
		return v, fmt.Errorf("copy /logs out: %w", copyErr)
	}
	r := readReward(files)
	v.Reward, v.Rewards, v.RawReward, v.Error = r.Value, r.Rewards, r.Raw, r.Err
	if r.Value == nil && rc != 0 {
		// A script that failed before its reward (set -e, a missing tool)
		// says so beside the missing verdict.
		v.Error = fmt.Sprintf("%s (the test script exited %d)", r.Err, rc)
	}
	if r.Err == harness.NoRewardFile {
		// A script that printed its result instead of writing it (a
		// "1" or "PASSED" on stdout) shows that beside the missing file.
		v.Error += "; " + outputEnd(out.Tail.String())
	}
	v.Findings = Findings(v, dir.Path(logName), dir.Path("logs", "verifier"))
	for _, f := range v.Findings {
		dir.Logf("verifier finding %s: %s", f.Kind, f.Detail)
	}
	dir.Logf("verifier exit %d: reward %v %s", rc, deref(r.Value), r.Err)
	return v, nil
}

// UseNetwork puts the sandbox h, now on network current, on network want
// (a sandbox.Network* mode) and returns the network it is then on: the
// bridge or no network for a verifier phase (harness.Networks.Verify), or
// back on its start network for a multi-step task's next solve. Nothing
// moves when want is current or "". The driver moves it with its
// sandbox.NetworkMover ability, else joins the bridge from an internal
// network with sandbox.BridgeJoiner; without them, or when the move
// fails, the error says so.
func UseNetwork(ctx context.Context, driver sandbox.Driver, h *sandbox.Handle, current, want string) (string, error) {
	if want == "" || want == current {
		return current, nil
	}
	if m, ok := driver.(sandbox.NetworkMover); ok {
		if err := m.MoveNetwork(ctx, h, want); err != nil {
			return current, fmt.Errorf("move the sandbox from network %s to %s: %w", current, want, err)
		}
		return want, nil
	}
	if j, ok := driver.(sandbox.BridgeJoiner); ok && want == sandbox.NetworkBridge && current == sandbox.NetworkInternal {
		if err := j.ConnectBridge(ctx, h); err != nil {
			return current, fmt.Errorf("join the bridge: %w", err)
		}
		return want, nil
	}
	return current, fmt.Errorf("move the sandbox from network %s to %s: the sandbox driver %T cannot", current, want, driver)
}

// Paths of the reward files in the sandbox.
const (
	RewardTxt  = "/logs/verifier/reward.txt"
	RewardJSON = "/logs/verifier/reward.json"
)

// copyLogs copies the sandbox's /logs (the verifier's files and the task's
// agent and artifact logs, in one call) into the cell's logs/ directory,
// symlinks stored as symlinks and never followed, and returns the reward
// files read from the same stream (sandbox.FileCopier: regular
// files of at most harness.MaxRewardFileBytes, nothing resolved on the
// host). A missing /logs is no files. The error is the engine's.
func copyLogs(ctx context.Context, driver sandbox.Driver, h *sandbox.Handle, dir cellfs.Dir) (map[string]sandbox.FileResult, error) {
	if err := os.RemoveAll(dir.Path("logs")); err != nil {
		return nil, err
	}
	fc, ok := driver.(sandbox.FileCopier)
	if !ok {
		return nil, fmt.Errorf("the sandbox driver %T cannot read files out without the host", driver)
	}
	files, err := fc.CopyOutFiles(ctx, h, "/logs", dir.Path(),
		map[string]int64{RewardTxt: harness.MaxRewardFileBytes, RewardJSON: harness.MaxRewardFileBytes})
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, nil
	}
	return files, err
}

// readReward parses the reward files copyLogs read. A reward file that is
// a symlink (or under one), a device, a directory or over the cap is no
// verdict with the reason.
func readReward(files map[string]sandbox.FileResult) harness.Reward {
	var txt, js []byte
	for _, f := range []struct {
		path string
		into *[]byte
	}{{RewardTxt, &txt}, {RewardJSON, &js}} {
		got, ok := files[f.path]
		switch {
		case !ok:
		case got.Err != nil:
			return harness.Reward{Err: path.Base(f.path) + ": not read: " + got.Err.Error()}
		default:
			*f.into = got.Data
			if *f.into == nil {
				*f.into = []byte{}
			}
		}
	}
	return harness.ParseReward(txt, js)
}

func deref(p *float64) any {
	if p == nil {
		return "none"
	}
	return *p
}

// outputEndBytes bounds the test script's last output line quoted in a
// verdict's error.
const outputEndBytes = 120

// outputEnd says how the test script's output ended, for a verdict
// without a reward file: its last non-empty line (at most outputEndBytes,
// quoted), or that it printed nothing.
func outputEnd(tail string) string {
	lines := strings.Split(strings.TrimRight(tail, " \t\r\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "the test script printed nothing"
	}
	return fmt.Sprintf("the test script's output ends %q (the verifier log has it all)", cellfs.Suffix(last, outputEndBytes))
}
