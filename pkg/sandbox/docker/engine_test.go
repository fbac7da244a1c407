package docker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// proxiedDocker returns a driver that talks to the engine through a
// socket proxy the test controls, with the given engine slack, and the
// proxy.
func proxiedDocker(t *testing.T, slack time.Duration) (*Driver, *testutil.DockerProxy) {
	t.Helper()
	p := testutil.NewDockerProxy(t)
	cli := p.Client(t)
	testutil.RequireImage(t, cli, testImage)
	d, err := New(Options{Client: cli, EngineSlack: slack})
	if err != nil {
		t.Fatal(err)
	}
	return d, p
}

// startRoomy starts a long-lived sandbox through p with the default
// engine slack, so that a loaded engine's slow container start is not
// taken for the hang a test means to cause later; the handle serves any
// driver of the same engine.
func startRoomy(t *testing.T, p *testutil.DockerProxy) *sandbox.Handle {
	t.Helper()
	d, err := New(Options{Client: p.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	return startLong(t, d)
}

// within runs f in a goroutine and fails the test when it has not
// returned after limit (a hang), returning how long it took.
func within(t *testing.T, limit time.Duration, what string, f func()) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s still waiting on the engine after %s", what, limit)
	}
	return time.Since(start)
}

// wantEngineTimeout checks that err is the engine timeout of a request
// whose name holds each of parts.
func wantEngineTimeout(t *testing.T, err error, parts ...string) {
	t.Helper()
	var et *sandbox.EngineTimeoutError
	if !errors.Is(err, sandbox.ErrEngineTimeout) || !errors.As(err, &et) {
		t.Fatalf("error %v, want an engine timeout", err)
	}
	for _, p := range parts {
		if !strings.Contains(et.Call, p) || !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name %q", err, p)
		}
	}
}

// TestEngineHangIsBounded: an engine that never answers one request (the
// start of the verifier's exec, an exec inspect while the command runs, a
// container create) fails that request after the budget it serves plus
// the slack, with the request named; it used to hold the caller for as
// long as the engine hung (Exec even past its own timeout: its deadline is
// looked at between polls).
func TestEngineHangIsBounded(t *testing.T) {
	// The slack is what a stalled request waits before it fails; the
	// requests that are not stalled must answer within it too, so it
	// leaves room for an engine slowed by the tests around it.
	const slack = 6 * time.Second
	const budget = 2 * time.Second
	// Generous for a loaded machine, far below a hang.
	const hang = time.Minute

	t.Run("exec start", func(t *testing.T) {
		t.Parallel()
		d, p := proxiedDocker(t, slack)
		h := startRoomy(t, p)
		stall := p.StallExecStart("hang-at-start")
		var err error
		took := within(t, hang, "Exec", func() {
			_, err = d.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "echo hang-at-start"}, Timeout: budget, Grace: time.Second})
		})
		if stall.Hits() != 1 {
			t.Fatalf("the exec start was not stalled (%d hits)", stall.Hits())
		}
		wantEngineTimeout(t, err, "POST /exec/", "/start")
		if took < slack || took > budget+slack+15*time.Second {
			t.Errorf("Exec took %s, want about the slack (%s)", took, slack)
		}
		// The sandbox is still driven: the next exec runs.
		if res, err := d.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"true"}, Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
			t.Fatalf("the next exec: %+v %v", res, err)
		}
	})

	t.Run("exec inspect", func(t *testing.T) {
		t.Parallel()
		d, p := proxiedDocker(t, slack)
		h := startRoomy(t, p)
		stall := p.Stall("GET /exec/*/json")
		var err error
		took := within(t, hang, "Exec", func() {
			_, err = d.Exec(context.Background(), h, sandbox.ExecSpec{Cmd: []string{"sleep", "300"}, Timeout: budget, Grace: time.Second})
		})
		if stall.Hits() == 0 {
			t.Fatal("no exec inspect was stalled")
		}
		wantEngineTimeout(t, err, "GET /exec/", "/json")
		if took > budget+slack+15*time.Second {
			t.Errorf("Exec took %s on a %s budget", took, budget)
		}
	})

	t.Run("container create", func(t *testing.T) {
		t.Parallel()
		d, p := proxiedDocker(t, slack)
		stall := p.Stall("POST /containers/create")
		run := "run-" + randomHex(4)
		var err error
		took := within(t, hang, "Start", func() {
			var h *sandbox.Handle
			h, err = d.Start(context.Background(), sandbox.Spec{RunID: run, Image: testImage, Network: sandbox.NetworkInternal, Lifetime: time.Minute})
			if err == nil {
				d.Destroy(context.Background(), h)
			}
		})
		if stall.Hits() != 1 {
			t.Fatalf("the create was not stalled (%d hits)", stall.Hits())
		}
		wantEngineTimeout(t, err, "POST /containers/create")
		if took > slack+15*time.Second {
			t.Errorf("Start took %s", took)
		}
		// The network made before the create is gone with it.
		if c, n := labelled(t, testutil.Docker(t), run); c+n != 0 {
			t.Fatalf("%d containers and %d networks of the failed Start remain", c, n)
		}
	})
}

// TestCreateInFlightAtCancel: a create still in flight when the caller's
// context ends (a Ctrl-C) lands in the engine all the same; Start waits
// for it and removes what it made, and a create answered only after the
// slack is followed and removed, which Settle waits for. It used to stay,
// Created, after Start returned (and after proctor exited).
func TestCreateInFlightAtCancel(t *testing.T) {
	const delay = 1500 * time.Millisecond
	for _, tc := range []struct {
		name, route, network string
		slack                time.Duration
	}{
		{"container create answered within the slack", "POST /containers/create", sandbox.NetworkNone, 30 * time.Second},
		{"network create answered within the slack", "POST /networks/create", sandbox.NetworkInternal, 30 * time.Second},
		{"container create answered after the slack", "POST /containers/create", sandbox.NetworkNone, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, p := proxiedDocker(t, tc.slack)
			slow := p.Delay(tc.route, delay)
			run := "run-" + randomHex(4)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				h, err := d.Start(ctx, sandbox.Spec{RunID: run, CellID: "c", Image: testImage, Network: tc.network, Lifetime: time.Minute})
				if err == nil {
					d.Destroy(context.Background(), h)
				}
				errc <- err
			}()
			slow.WaitHit(t, time.Minute)
			cancel() // the Ctrl-C, while the engine works on the create
			var err error
			within(t, time.Minute, "Start", func() { err = <-errc })
			if err == nil {
				t.Fatal("Start after the cancel returned no error")
			}
			if tc.slack < delay {
				wantEngineTimeout(t, err, tc.route)
			}
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			if n := d.Settle(sctx); n != 0 {
				t.Fatalf("Settle: %d creates unanswered", n)
			}
			slow.WaitAnswered(t, 1, time.Minute) // the engine made it
			cli := testutil.Docker(t)
			if c, n := labelled(t, cli, run); c+n != 0 {
				t.Fatalf("%d containers and %d networks of the cancelled Start remain (%v)", c, n, err)
			}
		})
	}
}
