package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

var proctorBin = Binary{Pkg: "./cmd/proctor", Env: []string{"CGO_ENABLED=0"}}

// ProctorBinary builds ./cmd/proctor once per test process, statically
// (CGO_ENABLED=0, as the egress proxy's sidecar image and the isolation
// probe want it), and returns its path: a file no test's TMPDIR or
// t.TempDir holds, so it outlives the test that built it (Binary.Path).
// The build uses the Go build cache, so it is quick after the first
// time. The test fails when the build does.
func ProctorBinary(t testing.TB) string {
	t.Helper()
	return proctorBin.Path(t)
}

// LabelTest marks the networks and containers a test makes with
// TestNetwork and HTTPHost (value: the test's name).
const LabelTest = "proctor.egress-test"

// TestNetwork creates a user-defined bridge network of the test's own
// (not internal: it stands for the network with a way out) and returns its
// name; it is removed when the test ends, after the containers of the
// test.
func TestNetwork(t testing.TB, cli *client.Client) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "proctor-test-" + hex.EncodeToString(b)
	ctx := context.Background()
	if _, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: map[string]string{LabelTest: t.Name()}}); err != nil {
		t.Fatalf("create test network: %v", err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), name) })
	return name
}

// HTTPHost starts a container of image python:3.11-slim on the test's
// network net, with the network alias alias, serving the files of a
// directory holding body as index.html over plain HTTP on port 80 (python's
// http.server), and returns its address on net. It waits (up to 3 min, for
// a loaded machine) until the server accepts connections. The container is removed when the test ends.
func HTTPHost(t testing.TB, cli *client.Client, net, alias, body string) string {
	t.Helper()
	ctx := context.Background()
	RequireImage(t, cli, "python:3.11-slim")
	script := "mkdir -p /srv && cd /srv && printf %s \"$BODY\" > index.html && exec python3 -m http.server 80 --bind 0.0.0.0"
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image: "python:3.11-slim", Cmd: []string{"sh", "-c", script}, Env: []string{"BODY=" + body},
		Labels: map[string]string{LabelTest: t.Name()},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(net)}, &network.NetworkingConfig{
		EndpointsConfig: map[string]*network.EndpointSettings{net: {Aliases: []string{alias}}},
	}, nil, "")
	if err != nil {
		t.Fatalf("create test host: %v", err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start test host: %v", err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ins, err := cli.ContainerInspect(ctx, created.ID)
		if err != nil {
			t.Fatalf("inspect test host: %v", err)
		}
		ip := ""
		if ins.NetworkSettings != nil && ins.NetworkSettings.Networks[net] != nil {
			ip = ins.NetworkSettings.Networks[net].IPAddress
		}
		if ip != "" && probeHTTP(ctx, cli, created.ID) {
			return ip
		}
		if time.Now().After(deadline) {
			t.Fatalf("test host on %s did not serve within 3 min", net)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval under a deadline
	}
}

// probeHTTP connects to the server's port from inside its own container
// (bash's /dev/tcp: no interpreter to start), waiting up to 20 s for the
// check to end.
func probeHTTP(ctx context.Context, cli *client.Client, cid string) bool {
	ex, err := cli.ContainerExecCreate(ctx, cid, container.ExecOptions{
		Cmd: []string{"bash", "-c", ": </dev/tcp/127.0.0.1/80"},
	})
	if err != nil {
		return false
	}
	if err := cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{}); err != nil {
		return false
	}
	for range 1000 {
		ins, err := cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			return false
		}
		if !ins.Running {
			return ins.ExitCode == 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
