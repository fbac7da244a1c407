package verifier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/verify"
)

// A task whose verifier's environment_mode is "separate" (Harbor's
// VerifierEnvironmentMode.SEPARATE) is scored in a fresh container of the
// verifier's own image, never in the agent's: the image is built from the
// tests directory (its Dockerfile, the tests directory the build context,
// as Harbor builds it) or is [verifier.environment].docker_image; only the
// work tree and /logs (the agent's logs and artifacts; /logs/verifier is
// made fresh) are carried over from the agent's sandbox, at the same
// paths. Nothing else the agent left (a file in /tmp, a changed tool in
// /usr/local/bin, a process) exists there. The tests are copied to /tests
// and /verifier as in the shared mode, and scored by verify.RunTests.

// separateStage is where the carried files wait on the host, in the
// cell's directory, removed once they are in the verifier's container.
const separateStage = "separate-verifier"

// runSeparate scores t in a fresh container: it builds or finds the
// verifier's image (ClassBuild when it cannot be made), copies the work
// tree (workTree, the solve's working directory) and /logs out of the
// agent's sandbox h, starts the verifier's container on network (its
// limits the verifier environment's), copies them in, runs the tests
// there and destroys it. The returned network is the container's; the
// OOM kills counted are the container's.
func (s *Service) runSeparate(ctx context.Context, job events.VerifyJob, t *task.Task, h *sandbox.Handle, dir cellfs.Dir, network string) (events.VerdictData, error) {
	var v events.VerdictData
	ve := t.VerifierEnvironment
	if ve == nil {
		return v, errors.New("separate verifier: the task has no verifier environment")
	}
	b, ok := s.driver.(sandbox.ImageBuilder)
	if !ok {
		return v, events.Classf(events.ClassSandbox, "the sandbox driver %T cannot build the separate verifier's image", s.driver)
	}
	logf, err := os.Create(dir.Path("verifier-build.log"))
	if err != nil {
		return v, err
	}
	buildContext := ""
	if ve.Dockerfile != "" {
		buildContext = filepath.Dir(ve.Dockerfile)
	}
	img, err := b.EnsureImage(ctx, sandbox.BuildSpec{
		Task: t.Name + "-verifier", Revision: t.Revision, EnvironmentDir: buildContext, DockerImage: ve.DockerImage,
		Timeout: time.Duration(ve.BuildTimeoutSec * float64(time.Second)), Log: logf,
	})
	_ = logf.Close()
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return v, events.Classed(events.ClassBuild, fmt.Errorf("the separate verifier's image: %w", err))
	}
	dir.Logf("separate verifier: image %s (cached %v)", img.Ref, img.Cached)

	workTree := job.Workdir
	if workTree == "" {
		workTree = "/"
	}
	stage := dir.Path(separateStage)
	if err := os.RemoveAll(stage); err != nil {
		return v, err
	}
	defer os.RemoveAll(stage)
	carry := []string{}
	for _, p := range []string{workTree, "/logs"} {
		if p == "/" {
			return v, fmt.Errorf("separate verifier: the work tree is /, which cannot be carried over")
		}
		host := filepath.Join(stage, fmt.Sprint(len(carry)))
		err := s.driver.CopyOut(ctx, h, p, host)
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			carry = append(carry, "")
			continue
		case err != nil:
			return v, fmt.Errorf("separate verifier: copy %s out of the agent's sandbox: %w", p, err)
		}
		carry = append(carry, filepath.Join(host, path.Base(p)))
	}

	if network != sandbox.NetworkBridge {
		network = sandbox.NetworkNone
	}
	vh, err := s.driver.Start(ctx, sandbox.Spec{
		RunID: job.RunID, CellID: job.CellID, Image: img.Ref, Env: t.SandboxEnv, Network: network,
		CPUs: ve.CPUs, MemoryMB: ve.MemoryMB,
		Lifetime: max(time.Duration(t.VerifierTimeoutSec*float64(time.Second))+harness.LifetimeSlack, harness.MinLifetime),
	})
	if err != nil {
		if ctx.Err() != nil {
			return v, ctx.Err()
		}
		return v, events.Classed(events.ClassSandbox, fmt.Errorf("start the separate verifier's container: %w", err))
	}
	defer s.destroy(ctx, vh)
	dir.Logf("separate verifier: container %.12s on network %s", vh.ID, network)
	for i, p := range []string{workTree, "/logs"} {
		if carry[i] == "" {
			continue
		}
		if err := s.driver.CopyIn(ctx, vh, carry[i], p); err != nil {
			return v, fmt.Errorf("separate verifier: copy %s into the verifier's container: %w", p, err)
		}
	}
	_ = os.RemoveAll(stage)
	oc, hasOOM := s.driver.(sandbox.OOMCounter)
	spec := verify.TaskTests(t)
	spec.Network = network
	v, err = verify.RunTests(ctx, s.driver, spec, vh, dir)
	if err != nil {
		return v, err
	}
	if hasOOM {
		if n, err := oc.OOMKills(ctx, vh); err == nil && n > 0 {
			v.OOMKilled = true
			dir.Logf("separate verifier: %d process(es) OOM-killed at the memory limit", n)
		}
	}
	return v, nil
}
