package testutil

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"
)

// proxyContainer starts a sleeping debian container through cli, labelled
// with the test's name, removed when the test ends.
func proxyContainer(t *testing.T, p *DockerProxy) string {
	t.Helper()
	cli := p.Client(t)
	RequireImage(t, cli, "debian:bookworm-slim")
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: "debian:bookworm-slim", Cmd: []string{"sleep", "120"},
		Labels: map[string]string{"proctor.proxy-test": t.Name()}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = Docker(t).ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// execOut runs cmd in the container through the proxy and returns its
// stdout (the exec's hijacked stream passes the proxy).
func execOut(ctx context.Context, t *testing.T, p *DockerProxy, cid string, cmd ...string) (string, error) {
	cli := p.Client(t)
	ex, err := cli.ContainerExecCreate(ctx, cid, container.ExecOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return "", err
	}
	resp, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return "", err
	}
	defer resp.Close()
	var out bytes.Buffer
	_, err = stdcopy.StdCopy(&out, &out, resp.Reader)
	return out.String(), err
}

// TestDockerProxyForwardsAndStalls: an exec's hijacked stream passes the
// proxy; StallExecStart stalls only the exec it names; Delay forwards a
// create the client gave up on.
func TestDockerProxyForwardsAndStalls(t *testing.T) {
	p := NewDockerProxy(t)
	cid := proxyContainer(t, p)
	ctx := context.Background()
	if out, err := execOut(ctx, t, p, cid, "echo", "through the proxy"); err != nil || out != "through the proxy\n" {
		t.Fatalf("exec through the proxy: %q %v", out, err)
	}

	stall := p.StallExecStart("stall-me")
	done := make(chan error, 1)
	go func() {
		_, err := execOut(ctx, t, p, cid, "echo", "stall-me")
		done <- err
	}()
	stall.WaitHit(t, 30*time.Second)
	if out, err := execOut(ctx, t, p, cid, "echo", "not me"); err != nil || out != "not me\n" {
		t.Fatalf("another exec beside the stalled one: %q %v", out, err)
	}
	select {
	case err := <-done:
		t.Fatalf("the stalled exec start returned: %v", err)
	default:
	}
	p.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled exec start did not end with the proxy")
	}

	// Delay: the client gives up, the engine still makes the container.
	p2 := NewDockerProxy(t)
	RequireImage(t, p2.Client(t), "debian:bookworm-slim")
	delay := p2.Delay("POST /containers/create", 500*time.Millisecond)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	label := "proctor.proxy-test=" + strings.ReplaceAll(t.Name(), "/", "-") + "-delay"
	go func() {
		_, err := p2.Client(t).ContainerCreate(cctx, &container.Config{Image: "debian:bookworm-slim", Cmd: []string{"true"},
			Labels: map[string]string{"proctor.proxy-test": strings.ReplaceAll(t.Name(), "/", "-") + "-delay"}}, nil, nil, nil, "")
		errc <- err
	}()
	delay.WaitHit(t, 30*time.Second)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled create returned no error")
	}
	delay.WaitAnswered(t, 1, 30*time.Second)
	f := filters.NewArgs(filters.Arg("label", label))
	cs, err := Docker(t).ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		_ = Docker(t).ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
	if len(cs) != 1 {
		t.Fatalf("the delayed create made %d containers, want 1 (the engine does what a cancelled request asked)", len(cs))
	}
}
