package harness

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// StepSetupError is a step's setup.sh that ran and failed: the step's
// own doing (it has no verdict), not proctor's.
type StepSetupError struct{ msg string }

func (e *StepSetupError) Error() string { return e.msg }

// UploadStepWorkdir copies the step's workdir/ into the working directory
// (each top-level entry replacing one of the same name; the entries and
// the directory itself owned by user when set), then runs its setup.sh there as user and removes it, as Harbor
// does. A setup.sh that fails is a *StepSetupError; every other error is
// proctor's. The launcher runs it before each step's solve, the probe
// before each step it probes.
func UploadStepWorkdir(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, s *task.Step, workdir, user string, dir cellfs.Dir) error {
	stage := StagePath("workdir")
	if err := d.CopyIn(ctx, h, s.WorkdirDir, stage); err != nil {
		return fmt.Errorf("upload steps/%s/workdir: %w", s.Name, err)
	}
	chown, own := "", ""
	if user != "" {
		// The solving user owns what is uploaded and the working
		// directory itself (as the agent arm makes it), so setup.sh can
		// write there.
		chown, own = ` && chown -R "$3" "$2/$n"`, `chown "$3" "$2" || exit 1
`
	}
	script := `mkdir -p "$2" || exit 1
` + own + `for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  n=$(basename "$f")
  rm -rf "$2/$n" && cp -a "$f" "$2/$n"` + chown + ` || exit 1
done
rm -rf "$(dirname "$1")"`
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script, "sh", stage, workdir, user}, Timeout: 5 * time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("upload steps/%s/workdir to %s: %w", s.Name, workdir, err)
	}
	dir.Logf("steps/%s/workdir uploaded to %s", s.Name, workdir)
	if s.SetupScript == "" {
		return nil
	}
	out, err := dir.OpenCapture("setup.log")
	if err != nil {
		return err
	}
	setup := path.Join(workdir, task.StepSetupScript)
	res, err = d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"bash", setup}, User: user, Workdir: workdir,
		Timeout: time.Duration(s.AgentTimeoutSec * float64(time.Second)), Grace: time.Second, Stdout: out, Stderr: out,
	})
	_ = out.Close(dir, "")
	// The reserved script is removed whatever it did, as root.
	if _, rerr := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"rm", "-f", setup}, Timeout: time.Minute}); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("steps/%s/workdir/%s: %w", s.Name, task.StepSetupScript, err)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return &StepSetupError{fmt.Sprintf("steps/%s/workdir/%s exited %d: %s", s.Name, task.StepSetupScript, res.ExitCode, strings.TrimSpace(cellfs.Suffix(out.Tail.String(), 300)))}
	}
	dir.Logf("steps/%s/workdir/%s ran as %q and was removed", s.Name, task.StepSetupScript, user)
	return nil
}
