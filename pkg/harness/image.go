package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// TaskImage builds or finds the task image with the driver's ImageBuilder
// ability (build output to build.log) and records ImageBuilt, also when the
// build or pull failed (with its error and time). A failed build is a
// ClassError of class build; a driver without the ability is one of class
// sandbox; a cancelled ctx is returned as is.
func TaskImage(ctx context.Context, env Env) (sandbox.ImageInfo, error) {
	b, ok := env.Driver().(sandbox.ImageBuilder)
	if !ok {
		return sandbox.ImageInfo{}, events.Classf(events.ClassSandbox, "the sandbox driver %T cannot build images", env.Driver())
	}
	dir, t := env.Dir(), env.Task()
	logf, err := os.Create(dir.Path("build.log"))
	if err != nil {
		return sandbox.ImageInfo{}, events.Classed(events.ClassBuild, err)
	}
	defer logf.Close()
	start := time.Now()
	img, err := b.EnsureImage(ctx, sandbox.BuildSpec{
		Task: t.Name, Revision: t.Revision, EnvironmentDir: environmentDir(t),
		DockerImage: t.DockerImage, Timeout: seconds(t.BuildTimeoutSec), Log: logf,
	})
	if err != nil && ctx.Err() != nil {
		return img, ctx.Err()
	}
	var be *sandbox.BuildError
	if img.Ref == "" && errors.As(err, &be) {
		img.Ref = be.Ref // a base image that could not be pulled
	}
	d := events.ImageBuiltData{
		Image: img.Ref, Cached: img.Cached, BuildSec: round3(time.Since(start).Seconds()), Workdir: img.Workdir,
		ImageID: img.ID, Key: img.Key,
	}
	if q, ok := env.(interface{ QueueSec() float64 }); ok {
		d.QueueSec = round3(q.QueueSec())
	}
	rules := map[string]bool{}
	for _, r := range img.Rewrites {
		d.Rewrites = append(d.Rewrites, r.From+" -> "+r.To)
		rules[r.Rule] = true
	}
	d.ImageMapRules = slices.Sorted(maps.Keys(rules))
	for _, b := range img.Bases {
		if d.Bases == nil {
			d.Bases = map[string]string{}
		}
		d.Bases[b.Ref] = b.ID
	}
	if err != nil {
		d.Error = err.Error()
		dir.Logf("image %s failed after %.3fs", img.Ref, d.BuildSec)
		if perr := env.Emit(ctx, events.ImageBuilt, d, time.Time{}); perr != nil {
			return img, perr
		}
		return img, events.Classed(events.ClassBuild, err)
	}
	dir.Logf("image %s (cached %v)", img.Ref, img.Cached)
	return img, env.Emit(ctx, events.ImageBuilt, d, time.Time{})
}

// environmentDir is the build context, or "" when the task has no
// Dockerfile and runs its docker_image.
func environmentDir(t *task.Task) string {
	if t.Dockerfile == "" {
		return ""
	}
	return t.EnvironmentDir
}

// refusal is the shared refusal rule (DESIGN §5): unsupported and blocked
// tasks first, then unresolved env of the tables the arm's cells get
// (task.UnresolvedFor: a [solution.env] variable errors only the oracle,
// a [verifier.env] one only arms that run the verifier), then what the arm
// needs (task.Refusal).
func refusal(t *task.Task, needs task.Needs) (events.ErrorClass, string) {
	if t.Unsupported != "" || t.Blocked != "" {
		return events.ClassRefused, t.Refusal(task.Needs{})
	}
	if keys := t.UnresolvedFor(needs); len(keys) > 0 {
		return events.ClassUnresolvedEnv, fmt.Sprintf("unresolved env in %s: %s (a ${VAR} reference or a non-scalar value is never forwarded)",
			path.Base(t.DefinitionFile), strings.Join(keys, ", "))
	}
	if why := t.Refusal(needs); why != "" {
		return events.ClassRefused, why
	}
	return "", ""
}

// composeSpec adds the task's compose services (task.Compose) to spec:
// each sidecar's image built from its build context, with its
// build.dockerfile, build.args and build.target, through the image cache
// and the image map (EnsureImage, output appended to build.log;
// tagged as the task's name plus "-" and the service name) or its `image:`
// mapped (and pulled only as a docker_image is), main's depends_on, and
// main's `environment` under the task's own env. A service image that
// cannot be made is a ClassError of class build. A task without compose
// services returns spec as it is.
func composeSpec(ctx context.Context, env Env, spec sandbox.Spec) (sandbox.Spec, error) {
	t := env.Task()
	c := t.Compose
	if c == nil {
		return spec, nil
	}
	b, ok := env.Driver().(sandbox.ImageBuilder)
	if !ok {
		return spec, events.Classf(events.ClassSandbox, "the sandbox driver %T cannot build images", env.Driver())
	}
	dir := env.Dir()
	logf, err := os.OpenFile(dir.Path("build.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return spec, events.Classed(events.ClassBuild, err)
	}
	defer logf.Close()
	spec.Env = withEnv(c.MainEnv, spec.Env)
	spec.DependsOn = c.MainDependsOn
	for _, s := range c.Services {
		fmt.Fprintf(logf, "# compose service %s\n", s.Name)
		img, err := b.EnsureImage(ctx, sandbox.BuildSpec{
			Task: t.Name + "-" + s.Name, Revision: t.Revision, EnvironmentDir: s.BuildContext,
			Dockerfile: s.Dockerfile, BuildArgs: s.BuildArgs, Target: s.BuildTarget,
			DockerImage: s.Image, Timeout: seconds(t.BuildTimeoutSec), Log: logf,
		})
		if err != nil {
			if ctx.Err() != nil {
				return spec, ctx.Err()
			}
			return spec, events.Classed(events.ClassBuild, fmt.Errorf("compose service %s: %w", s.Name, err))
		}
		dir.Logf("compose service %s: image %s (cached %v)", s.Name, img.Ref, img.Cached)
		svc := sandbox.Service{
			Name: s.Name, Image: img.Ref, Entrypoint: s.Entrypoint, Cmd: s.Command, Env: s.Env,
			Workdir: s.Workdir, User: s.User, DependsOn: s.DependsOn, CPUs: s.CPUs, MemoryMB: s.MemoryMB,
		}
		if h := s.Healthcheck; h != nil {
			svc.Healthcheck = &sandbox.Healthcheck{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
		}
		spec.Services = append(spec.Services, svc)
	}
	return spec, nil
}
