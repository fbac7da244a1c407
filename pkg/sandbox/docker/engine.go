package docker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// engine is the driver's engine client: a *client.Client whose every
// request the driver makes is bounded by the budget it serves plus the
// driver's slack (Options.EngineSlack), so an engine that hangs on one
// call (an exec start that never returns) fails that call with a
// *sandbox.EngineTimeoutError naming it instead of holding the cell
// forever:
//
//   - a request that serves no budget (create, start, inspect, connect,
//     the start of an exec, pause, remove, ...) is answered within the
//     slack; a stream's answer (logs, a copy out, stats) too, after which
//     its body is read under the caller's context only;
//   - a container stop, within its grace plus the slack; a copy into a
//     container or a commit, within transferBudget plus the slack;
//   - an exec's own run is bounded by Exec (its timeout, then the kill
//     and drain bounds), not here.
//
// The start of an exec is a hijacked connection whose answer the client
// library reads without looking at its context, so it is waited for in a
// goroutine; an answer that comes after the bound is closed then.
//
// A create (container or network) is not cancelled with its caller's
// context: it is waited for up to the slack even after a Ctrl-C, so the
// caller learns the id of what the engine made and removes it. One the
// engine answers later than that is followed in the background and what
// it made is removed when the answer comes (Driver.Settle waits for
// them). Image builds and pulls are not bounded here: BuildSpec.Timeout
// bounds them.
type engine struct {
	*client.Client
	slack time.Duration
	log   *slog.Logger
	// late counts the creates still followed after their bound.
	late    sync.WaitGroup
	pending atomic.Int64
}

// transferBudget is the budget of a request that moves a container's
// files (a copy into it, a commit of it): the engine answers once it has
// written them all.
const transferBudget = 10 * time.Minute

// errBound is the cause of a request context that reached its bound.
var errBound = errors.New("engine request bound reached")

// bounded runs fn, the request call, with ctx bounded by budget plus the
// slack. When that bound (not ctx) ended it, the error is a
// *sandbox.EngineTimeoutError naming call.
func bounded[T any](e *engine, ctx context.Context, call string, budget time.Duration, fn func(context.Context) (T, error)) (T, error) {
	bound := budget + e.slack
	cctx, cancel := context.WithTimeoutCause(ctx, bound, errBound)
	defer cancel()
	v, err := fn(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errBound) {
		return v, &sandbox.EngineTimeoutError{Call: call, Bound: bound}
	}
	return v, err
}

// bounded0 is bounded for a request that returns only an error.
func bounded0(e *engine, ctx context.Context, call string, budget time.Duration, fn func(context.Context) error) error {
	_, err := bounded(e, ctx, call, budget, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// streamed runs fn, a request whose answer is a stream, with the slack
// bounding the wait for the answer only: the body returned is read under
// ctx, and closing it releases the request.
func streamed(e *engine, ctx context.Context, call string, fn func(context.Context) (io.ReadCloser, error)) (io.ReadCloser, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(e.slack, func() { cancel(errBound) })
	rc, err := fn(cctx)
	if !t.Stop() && ctx.Err() == nil {
		if rc != nil {
			rc.Close()
		}
		cancel(nil)
		return nil, &sandbox.EngineTimeoutError{Call: call, Bound: e.slack}
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	return &releasingBody{ReadCloser: rc, release: func() { cancel(nil) }}, nil
}

// releasingBody releases its request's context when closed.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

type answer[T any] struct {
	v   T
	err error
}

// followed runs fn, a request that makes an engine object, without ctx's
// cancellation, and waits up to the slack for its answer. Past the slack
// it returns a *sandbox.EngineTimeoutError naming call and keeps waiting
// in the background: when the answer comes, remove gets what was made.
func followed[T any](e *engine, ctx context.Context, call string, fn func(context.Context) (T, error), remove func(T)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err // nothing new is made after the caller ended
	}
	ch := make(chan answer[T], 1)
	go func() {
		v, err := fn(context.WithoutCancel(ctx))
		ch <- answer[T]{v, err}
	}()
	t := time.NewTimer(e.slack)
	defer t.Stop()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-t.C:
	}
	e.pending.Add(1)
	e.late.Go(func() {
		defer e.pending.Add(-1)
		a := <-ch
		if a.err == nil {
			e.log.Warn("sandbox: the engine answered a create after its bound; removing what it made", "call", call)
			remove(a.v)
		}
	})
	var zero T
	return zero, &sandbox.EngineTimeoutError{Call: call, Bound: e.slack}
}

// settle waits until every create followed past its bound was answered
// and what it made removed, or ctx ends; it returns how many are still
// unanswered.
func (e *engine) settle(ctx context.Context) int {
	done := make(chan struct{})
	go func() {
		e.late.Wait()
		close(done)
	}()
	select {
	case <-done:
		return 0
	case <-ctx.Done():
		return int(e.pending.Load())
	}
}

// removeLate removes a container or network a late create made.
func (e *engine) removeLate(kind, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), sandbox.DestroyTimeout)
	defer cancel()
	var err error
	if kind == "container" {
		err = e.Client.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	} else {
		err = e.Client.NetworkRemove(ctx, id)
	}
	if err != nil {
		e.log.Warn("sandbox: removing what a late create made", kind, short(id), "err", err)
	}
}

func (e *engine) ContainerCreate(ctx context.Context, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error) {
	return followed(e, ctx, "POST /containers/create", func(ctx context.Context) (container.CreateResponse, error) {
		return e.Client.ContainerCreate(ctx, cfg, hc, nc, platform, name)
	}, func(r container.CreateResponse) { e.removeLate("container", r.ID) })
}

func (e *engine) NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error) {
	return followed(e, ctx, "POST /networks/create", func(ctx context.Context) (network.CreateResponse, error) {
		return e.Client.NetworkCreate(ctx, name, opts)
	}, func(r network.CreateResponse) { e.removeLate("network", r.ID) })
}

func (e *engine) ContainerStart(ctx context.Context, id string, opts container.StartOptions) error {
	return bounded0(e, ctx, "POST /containers/"+short(id)+"/start", 0, func(ctx context.Context) error {
		return e.Client.ContainerStart(ctx, id, opts)
	})
}

func (e *engine) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	return bounded(e, ctx, "GET /containers/"+short(id)+"/json", 0, func(ctx context.Context) (container.InspectResponse, error) {
		return e.Client.ContainerInspect(ctx, id)
	})
}

func (e *engine) ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error {
	return bounded0(e, ctx, "DELETE /containers/"+short(id), 0, func(ctx context.Context) error {
		return e.Client.ContainerRemove(ctx, id, opts)
	})
}

func (e *engine) ContainerStop(ctx context.Context, id string, opts container.StopOptions) error {
	grace := 10 * time.Second // the engine's default
	if opts.Timeout != nil && *opts.Timeout >= 0 {
		grace = time.Duration(*opts.Timeout) * time.Second
	}
	return bounded0(e, ctx, "POST /containers/"+short(id)+"/stop", grace, func(ctx context.Context) error {
		return e.Client.ContainerStop(ctx, id, opts)
	})
}

func (e *engine) ContainerPause(ctx context.Context, id string) error {
	return bounded0(e, ctx, "POST /containers/"+short(id)+"/pause", 0, func(ctx context.Context) error {
		return e.Client.ContainerPause(ctx, id)
	})
}

func (e *engine) ContainerUnpause(ctx context.Context, id string) error {
	return bounded0(e, ctx, "POST /containers/"+short(id)+"/unpause", 0, func(ctx context.Context) error {
		return e.Client.ContainerUnpause(ctx, id)
	})
}

func (e *engine) ContainerTop(ctx context.Context, id string, args []string) (container.TopResponse, error) {
	return bounded(e, ctx, "GET /containers/"+short(id)+"/top", 0, func(ctx context.Context) (container.TopResponse, error) {
		return e.Client.ContainerTop(ctx, id, args)
	})
}

func (e *engine) ContainerUpdate(ctx context.Context, id string, u container.UpdateConfig) (container.UpdateResponse, error) {
	return bounded(e, ctx, "POST /containers/"+short(id)+"/update", 0, func(ctx context.Context) (container.UpdateResponse, error) {
		return e.Client.ContainerUpdate(ctx, id, u)
	})
}

func (e *engine) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	return bounded(e, ctx, "GET /containers/json", 0, func(ctx context.Context) ([]container.Summary, error) {
		return e.Client.ContainerList(ctx, opts)
	})
}

func (e *engine) ContainerCommit(ctx context.Context, id string, opts container.CommitOptions) (container.CommitResponse, error) {
	return bounded(e, ctx, "POST /commit?container="+short(id), transferBudget, func(ctx context.Context) (container.CommitResponse, error) {
		return e.Client.ContainerCommit(ctx, id, opts)
	})
}

func (e *engine) ContainerExecCreate(ctx context.Context, id string, opts container.ExecOptions) (container.ExecCreateResponse, error) {
	return bounded(e, ctx, "POST /containers/"+short(id)+"/exec", 0, func(ctx context.Context) (container.ExecCreateResponse, error) {
		return e.Client.ContainerExecCreate(ctx, id, opts)
	})
}

func (e *engine) ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error) {
	return bounded(e, ctx, "GET /exec/"+short(execID)+"/json", 0, func(ctx context.Context) (container.ExecInspect, error) {
		return e.Client.ContainerExecInspect(ctx, execID)
	})
}

// ContainerExecAttach starts the exec (POST /exec/{id}/start, a hijacked
// connection). The client library reads the engine's answer without
// looking at ctx, so the answer is waited for here, up to the slack or
// until ctx ends; a later answer's connection is closed when it comes.
func (e *engine) ContainerExecAttach(ctx context.Context, execID string, cfg container.ExecAttachOptions) (types.HijackedResponse, error) {
	ch := make(chan answer[types.HijackedResponse], 1)
	go func() {
		r, err := e.Client.ContainerExecAttach(ctx, execID, cfg)
		ch <- answer[types.HijackedResponse]{r, err}
	}()
	t := time.NewTimer(e.slack)
	defer t.Stop()
	var err error
	select {
	case a := <-ch:
		return a.v, a.err
	case <-t.C:
		err = &sandbox.EngineTimeoutError{Call: "POST /exec/" + short(execID) + "/start", Bound: e.slack}
	case <-ctx.Done():
		err = ctx.Err()
	}
	go func() {
		if a := <-ch; a.err == nil {
			a.v.Close()
		}
	}()
	return types.HijackedResponse{}, err
}

func (e *engine) ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error) {
	return streamed(e, ctx, "GET /containers/"+short(id)+"/logs", func(ctx context.Context) (io.ReadCloser, error) {
		return e.Client.ContainerLogs(ctx, id, opts)
	})
}

func (e *engine) ContainerStatsOneShot(ctx context.Context, id string) (container.StatsResponseReader, error) {
	var os string
	rc, err := streamed(e, ctx, "GET /containers/"+short(id)+"/stats", func(ctx context.Context) (io.ReadCloser, error) {
		r, err := e.Client.ContainerStatsOneShot(ctx, id)
		os = r.OSType
		return r.Body, err
	})
	return container.StatsResponseReader{Body: rc, OSType: os}, err
}

func (e *engine) CopyFromContainer(ctx context.Context, id, src string) (io.ReadCloser, container.PathStat, error) {
	var st container.PathStat
	rc, err := streamed(e, ctx, "GET /containers/"+short(id)+"/archive", func(ctx context.Context) (io.ReadCloser, error) {
		rc, s, err := e.Client.CopyFromContainer(ctx, id, src)
		st = s
		return rc, err
	})
	return rc, st, err
}

func (e *engine) CopyToContainer(ctx context.Context, id, dst string, content io.Reader, opts container.CopyToContainerOptions) error {
	return bounded0(e, ctx, "PUT /containers/"+short(id)+"/archive", transferBudget, func(ctx context.Context) error {
		return e.Client.CopyToContainer(ctx, id, dst, content, opts)
	})
}

func (e *engine) NetworkRemove(ctx context.Context, id string) error {
	return bounded0(e, ctx, "DELETE /networks/"+short(id), 0, func(ctx context.Context) error {
		return e.Client.NetworkRemove(ctx, id)
	})
}

func (e *engine) NetworkConnect(ctx context.Context, netID, id string, cfg *network.EndpointSettings) error {
	return bounded0(e, ctx, "POST /networks/"+short(netID)+"/connect", 0, func(ctx context.Context) error {
		return e.Client.NetworkConnect(ctx, netID, id, cfg)
	})
}

func (e *engine) NetworkDisconnect(ctx context.Context, netID, id string, force bool) error {
	return bounded0(e, ctx, "POST /networks/"+short(netID)+"/disconnect", 0, func(ctx context.Context) error {
		return e.Client.NetworkDisconnect(ctx, netID, id, force)
	})
}

func (e *engine) NetworkList(ctx context.Context, opts network.ListOptions) ([]network.Summary, error) {
	return bounded(e, ctx, "GET /networks", 0, func(ctx context.Context) ([]network.Summary, error) {
		return e.Client.NetworkList(ctx, opts)
	})
}

func (e *engine) NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (network.Inspect, error) {
	return bounded(e, ctx, "GET /networks/"+short(id), 0, func(ctx context.Context) (network.Inspect, error) {
		return e.Client.NetworkInspect(ctx, id, opts)
	})
}

func (e *engine) ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error) {
	return bounded(e, ctx, "GET /images/"+ref+"/json", 0, func(ctx context.Context) (image.InspectResponse, error) {
		return e.Client.ImageInspect(ctx, ref, opts...)
	})
}
