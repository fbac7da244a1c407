package docker

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// newTestDocker returns a Docker driver on the local engine, skipping (or
// failing under CI) when there is none or the test image is missing.
func newTestDocker(t *testing.T, m *sandbox.ImageMap) (*Driver, *client.Client) {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, testImage)
	d, err := New(Options{Client: cli, ImageMap: m})
	if err != nil {
		t.Fatal(err)
	}
	return d, cli
}

// execPathDocker is a driver that finds no cgroup of its containers on
// this machine (Options.CgroupRoot names an empty directory), so it
// signals, counts and reads OOM kills through execs, as for an engine on
// another machine.
func execPathDocker(t *testing.T) *Driver {
	t.Helper()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, testImage)
	d, err := New(Options{Client: cli, CgroupRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startLong starts a sandbox of testImage with a 5-minute lifetime on d,
// destroyed when the test ends.
func startLong(t *testing.T, d *Driver) *sandbox.Handle {
	t.Helper()
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage, Lifetime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Destroy(ctx, h) })
	return h
}

// labelled lists the containers and networks labelled proctor.run=run.
func labelled(t *testing.T, cli *client.Client, run string) (containers, networks int) {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelRun+"="+run))
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.NetworkList(context.Background(), network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs), len(ns)
}

func TestDockerStartLabelsLimitsAndDestroy(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	run := "run-" + randomHex(4)
	h, err := d.Start(ctx, sandbox.Spec{RunID: run, CellID: "t/oracle/-/0", Image: testImage, CPUs: 0.5, MemoryMB: 256, Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	ins, err := cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ins.Config.Labels[sandbox.LabelRun] != run || ins.Config.Labels[sandbox.LabelCell] != "t/oracle/-/0" || ins.Config.Labels[sandbox.LabelManaged] != "1" {
		t.Errorf("labels %v", ins.Config.Labels)
	}
	if ins.HostConfig.NetworkMode != "none" || ins.HostConfig.NanoCPUs != 5e8 || ins.HostConfig.Memory != 256<<20 {
		t.Errorf("network %q cpus %d memory %d", ins.HostConfig.NetworkMode, ins.HostConfig.NanoCPUs, ins.HostConfig.Memory)
	}
	if got := strings.Join(ins.Config.Entrypoint, " "); got != "sleep 60" {
		t.Errorf("keep-alive %q, want sleep 60", got)
	}
	if len(ins.Mounts) != 0 {
		t.Errorf("mounts %v, want none", ins.Mounts)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after Destroy: %d containers, %d networks labelled with the run", c, n)
	}
}

func TestDockerUser(t *testing.T) {
	t.Parallel()
	d, _ := newTestDocker(t, nil)
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	for user, want := range map[string]string{"": "0\n", "10001": "10001\n"} {
		var out testutil.SyncBuffer
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"id", "-u"}, User: user, Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != want {
			t.Errorf("user %q: %+v %v %q", user, res, err, out.String())
		}
	}
}

func TestDockerInternalNetworkAndConnectBridge(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	run := "run-" + randomHex(4)
	h, err := d.Start(ctx, sandbox.Spec{RunID: run, CellID: "c", Image: testImage, Network: sandbox.NetworkInternal})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	nid := h.State["network"]
	if nid == "" {
		t.Fatal("no network recorded in the handle state")
	}
	n, err := cli.NetworkInspect(ctx, nid, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !n.Internal || n.Labels[sandbox.LabelRun] != run {
		t.Fatalf("network internal=%v labels=%v", n.Internal, n.Labels)
	}
	if err := d.ConnectBridge(ctx, h); err != nil {
		t.Fatal(err)
	}
	ins, err := cli.ContainerInspect(ctx, h.ID)
	if err != nil {
		t.Fatal(err)
	}
	nets := ins.NetworkSettings.Networks
	if _, ok := nets[sandbox.NetworkBridge]; !ok || len(nets) != 1 {
		t.Fatalf("networks after ConnectBridge: %v", keys(nets))
	}
	if err := d.ConnectBridge(ctx, h); err != nil {
		t.Fatalf("second ConnectBridge: %v", err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.NetworkInspect(ctx, nid, network.InspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("network still there after Destroy: %v", err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestDockerLifetimeEndsContainer(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage, Lifetime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ins, err := cli.ContainerInspect(ctx, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !ins.State.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("container still running long after its lifetime")
		}
	}
	if _, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrDestroyed) {
		t.Fatalf("Exec in a stopped container: %v, want ErrDestroyed", err)
	}
}

func TestDockerStartErrors(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	if _, err := d.Start(ctx, sandbox.Spec{Image: testImage, Network: "host"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("network host: %v", err)
	}
	if _, err := d.Start(ctx, sandbox.Spec{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("no image: %v", err)
	}
	// A missing image leaves nothing behind, not even the network.
	run := "run-" + randomHex(4)
	if _, err := d.Start(ctx, sandbox.Spec{RunID: run, Image: "proctor-test/missing:none", Network: sandbox.NetworkInternal}); err == nil {
		t.Fatal("Start of a missing image succeeded")
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after a failed Start: %d containers, %d networks", c, n)
	}
}

func TestDockerGC(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	ctx := context.Background()
	dead, live := "run-"+randomHex(4), "run-"+randomHex(4)
	for _, run := range []string{dead, dead, live} {
		h, err := d.Start(ctx, sandbox.Spec{RunID: run, CellID: "c", Image: testImage, Network: sandbox.NetworkInternal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Destroy(ctx, h) })
	}
	nc, nn, err := d.GCDead(ctx, func(run string) bool { return run != dead })
	if err != nil {
		t.Fatal(err)
	}
	if nc < 2 || nn < 2 {
		t.Errorf("GCDead removed %d containers, %d networks; want at least 2 each", nc, nn)
	}
	if c, n := labelled(t, cli, dead); c != 0 || n != 0 {
		t.Errorf("dead run left %d containers, %d networks", c, n)
	}
	if c, n := labelled(t, cli, live); c != 1 || n != 1 {
		t.Errorf("live run has %d containers, %d networks; want 1, 1", c, n)
	}
	if nc, nn, err := d.GC(ctx, live); err != nil || nc != 1 || nn != 1 {
		t.Errorf("GC: %d %d %v", nc, nn, err)
	}
	if c, n := labelled(t, cli, live); c != 0 || n != 0 {
		t.Errorf("after GC: %d containers, %d networks", c, n)
	}
}

// writeEnv writes an environment dir with the given Dockerfile and a
// skills/ dir holding a file.
func writeEnv(t *testing.T, dockerfile string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "Dockerfile"), dockerfile, 0o644)
	writeFile(t, filepath.Join(dir, "skills", "secret.md"), "do not ship\n", 0o644)
	writeFile(t, filepath.Join(dir, "data.txt"), "context file\n", 0o644)
	return dir
}

func removeImage(t *testing.T, cli *client.Client, ref string) {
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
}

// removeRevisionImages removes, when the test ends, every task image built
// for revision rev (the tags depend on the image key, known only after the
// build).
func removeRevisionImages(t *testing.T, cli *client.Client, rev string) {
	t.Cleanup(func() {
		ctx := context.Background()
		imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelRevision+"="+rev))})
		if err != nil {
			t.Errorf("list the test's images: %v", err)
			return
		}
		for _, im := range imgs {
			_, _ = cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	})
}

func TestEnsureImageBuildCacheAndMap(t *testing.T) {
	t.Parallel()
	m, err := sandbox.ParseImageMap(strings.NewReader("stand-in.invalid/debian:12 = "+testImage+"\n"), "map")
	if err != nil {
		t.Fatal(err)
	}
	d, cli := newTestDocker(t, m)
	ctx := context.Background()
	env := writeEnv(t, `FROM stand-in.invalid/debian:12 AS base
COPY data.txt /data.txt
COPY skills/ /skills/
RUN ls -A /skills | wc -l > /skills-count
WORKDIR /app
`)
	rev := randomHex(32)
	b := sandbox.BuildSpec{Task: "Demo/Hello World", Revision: rev, EnvironmentDir: env}
	var log testutil.SyncBuffer
	b.Log = &log
	removeRevisionImages(t, cli, rev)
	info, err := d.EnsureImage(ctx, b)
	if err != nil {
		t.Fatalf("EnsureImage: %v\n%s", err, log.String())
	}
	tag := info.Ref
	base, err := cli.ImageInspect(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	wantBases := []sandbox.BaseImage{{Ref: testImage, ID: base.ID}}
	if info.Cached || info.Source != "build" || info.Workdir != "/app" || info.ID == "" || len(info.Key) != 64 ||
		tag != sandbox.ImageTag(b.Task, info.Key) || !reflect.DeepEqual(info.Bases, wantBases) {
		t.Fatalf("info %+v", info)
	}
	if !strings.HasPrefix(tag, "proctor-task/demo/hello-world:") || len(tag) != len("proctor-task/demo/hello-world:")+12 {
		t.Fatalf("tag %q", tag)
	}
	if len(info.Rewrites) != 1 || info.Rewrites[0].From != "stand-in.invalid/debian:12" || info.Rewrites[0].Line != 1 {
		t.Fatalf("rewrites %+v", info.Rewrites)
	}
	if !strings.Contains(log.String(), "Step 1/") || !strings.Contains(info.Log, "Successfully tagged") {
		t.Fatalf("build log not kept: %q", info.Log)
	}
	ins, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if ins.Config.Labels[sandbox.LabelRevision] != rev || ins.Config.Labels[sandbox.LabelTask] != b.Task || ins.Config.Labels[sandbox.LabelImageKey] != info.Key {
		t.Errorf("image labels %v", ins.Config.Labels)
	}
	if wd, err := d.ImageWorkdir(ctx, tag); err != nil || wd != "/app" {
		t.Errorf("ImageWorkdir: %q %v", wd, err)
	}
	// skills/ went in empty, the other context files as they are.
	h, err := d.Start(ctx, sandbox.Spec{Image: tag})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	var out testutil.SyncBuffer
	if res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", "cat /skills-count /data.txt; pwd"}, Stdout: &out}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if out.String() != "0\ncontext file\n/app\n" {
		t.Fatalf("inside the image: %q", out.String())
	}

	// Cached: the same revision, Dockerfile and base ids are never rebuilt.
	again, err := d.EnsureImage(ctx, sandbox.BuildSpec{Task: b.Task, Revision: rev, EnvironmentDir: env})
	if err != nil || !again.Cached || again.ID != info.ID || again.Ref != tag || len(again.Rewrites) != 1 || !reflect.DeepEqual(again.Bases, wantBases) {
		t.Fatalf("second EnsureImage: %+v %v", again, err)
	}
}

func TestEnsureImageBuildFailure(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	env := writeEnv(t, "FROM "+testImage+"\nRUN echo about to fail && exit 7\n")
	b := sandbox.BuildSpec{Task: "fails", Revision: randomHex(32), EnvironmentDir: env}
	removeRevisionImages(t, cli, b.Revision)
	_, err := d.EnsureImage(context.Background(), b)
	var be *sandbox.BuildError
	if !errors.As(err, &be) || be.TimedOut || be.Pull {
		t.Fatalf("want a build error, got %v", err)
	}
	if !strings.Contains(be.Message, "returned a non-zero code: 7") || !strings.Contains(be.Log, "about to fail") {
		t.Fatalf("message %q log %q", be.Message, be.Log)
	}
	// The error ends with what the failing command printed.
	if !strings.HasSuffix(err.Error(), "returned a non-zero code: 7\nabout to fail") {
		t.Fatalf("error %q", err)
	}

	// Coloured output is stored as plain text, and the cause a package
	// manager printed ends the error.
	// (One stream: the builder interleaves stdout and stderr as they come.)
	env = writeEnv(t, "FROM "+testImage+"\nRUN printf 'bar  50%%\\rbar 100%%\\n' >&2; printf '\\033[1;31mE: \\033[0mUnable to locate package foo\\n' >&2; exit 100\n")
	var log testutil.SyncBuffer
	b = sandbox.BuildSpec{Task: "fails", Revision: b.Revision, EnvironmentDir: env, Log: &log}
	_, err = d.EnsureImage(context.Background(), b)
	if !errors.As(err, &be) || !strings.HasSuffix(err.Error(), "returned a non-zero code: 100\nbar 100%\nE: Unable to locate package foo") {
		t.Fatalf("error %q", err)
	}
	if strings.ContainsAny(log.String(), "\x1b\r") || strings.ContainsAny(be.Log, "\x1b\r") || !strings.Contains(log.String(), "\nE: Unable to locate package foo\n") {
		t.Fatalf("build log not plain: %q", log.String())
	}

	// A step that fails without a word: the error holds nothing an
	// earlier step printed (its lines said nothing about this failure).
	env = writeEnv(t, "FROM "+testImage+"\nRUN echo an earlier step went fine\nRUN exit 3\n")
	b = sandbox.BuildSpec{Task: "fails", Revision: b.Revision, EnvironmentDir: env}
	_, err = d.EnsureImage(context.Background(), b)
	if !errors.As(err, &be) || !strings.HasSuffix(err.Error(), "returned a non-zero code: 3") || strings.Contains(err.Error(), "earlier step") {
		t.Fatalf("error %q", err)
	}
}

func TestEnsureImageBuildTimeout(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	env := writeEnv(t, "FROM "+testImage+"\nRUN echo building && sleep 60\n")
	b := sandbox.BuildSpec{Task: "slow", Revision: randomHex(32), EnvironmentDir: env, Timeout: 3 * time.Second}
	removeRevisionImages(t, cli, b.Revision)
	_, err := d.EnsureImage(context.Background(), b)
	var be *sandbox.BuildError
	if !errors.As(err, &be) || !be.TimedOut {
		t.Fatalf("want a timed-out build error, got %v", err)
	}
}

func TestEnsureImageDockerImage(t *testing.T) {
	t.Parallel()
	m, err := sandbox.ParseImageMap(strings.NewReader("gone.invalid/ = docker.io/library/\n"+"gone.invalid/debian:bookworm-slim = "+testImage+"\n"), "map")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := newTestDocker(t, m)
	ctx := context.Background()
	empty := t.TempDir()
	info, err := d.EnsureImage(ctx, sandbox.BuildSpec{Task: "prebuilt", Revision: "abc", EnvironmentDir: empty, DockerImage: "gone.invalid/debian:bookworm-slim"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Ref != testImage || !info.Cached || info.Pulled || info.Source != "image" || len(info.Rewrites) != 1 || info.Rewrites[0].Rule != "gone.invalid/debian:bookworm-slim" {
		t.Fatalf("info %+v", info)
	}
	// A missing image that cannot be pulled is a pull error.
	_, err = d.EnsureImage(ctx, sandbox.BuildSpec{Task: "missing", DockerImage: "proctor-test.invalid/none:1", Timeout: time.Minute})
	var be *sandbox.BuildError
	if !errors.As(err, &be) || !be.Pull {
		t.Fatalf("want a pull error, got %v", err)
	}
	if _, err := d.EnsureImage(ctx, sandbox.BuildSpec{Task: "nothing", EnvironmentDir: empty}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Fatalf("no Dockerfile, no docker_image: %v", err)
	}
	if _, err := d.ImageWorkdir(ctx, "proctor-test.invalid/none:1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("ImageWorkdir of a missing image: %v", err)
	}
}

// TestDockerDestroyAfterCancel checks that a cancelled context (Ctrl-C)
// still lets Destroy remove the container.
func TestDockerDestroyAfterCancel(t *testing.T) {
	t.Parallel()
	d, cli := newTestDocker(t, nil)
	run := "run-" + randomHex(4)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := d.Start(ctx, sandbox.Spec{RunID: run, Image: testImage, Network: sandbox.NetworkInternal})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"true"}})
	if err != nil || !res.TimedOut {
		t.Fatalf("Exec with a cancelled context: %+v %v", res, err)
	}
	if err := d.Destroy(ctx, h); err != nil {
		t.Fatal(err)
	}
	if c, n := labelled(t, cli, run); c != 0 || n != 0 {
		t.Fatalf("after Destroy: %d containers, %d networks", c, n)
	}
}

// buildTestImage builds dockerfile (context: nothing else) as tag with the
// engine directly and returns the image id; the caller removes it.
func buildTestImage(t *testing.T, cli *client.Client, tag, dockerfile string) string {
	t.Helper()
	ctx := context.Background()
	var ctxTar bytes.Buffer
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "Dockerfile"), dockerfile, 0o644)
	if err := writeBuildContext(&ctxTar, dir, "Dockerfile", []byte(dockerfile)); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1,
		Labels: map[string]string{sandbox.LabelManaged: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	msg, err := readJSONMessages(resp.Body, &log)
	resp.Body.Close()
	if err != nil || msg != "" {
		t.Fatalf("build %s: %s %v\n%s", tag, msg, err, log.String())
	}
	ins, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	return ins.ID
}

// TestEnsureImageKeyCoversMapAndBases: the image cache is keyed on what the
// build used. A task needing python3 passes its build with
// `debian:bookworm-slim = <an image with python3>`, and the same task
// without the map builds against the real base and fails, instead of
// reusing the mapped image; a base re-tagged to another id is built anew.
func TestEnsureImageKeyCoversMapAndBases(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, testImage)
	ctx := context.Background()
	standIn := "proctor-test/with-python:" + randomHex(6)
	rev := randomHex(32)
	var standIns []string
	t.Cleanup(func() {
		// The task images built on the stand-ins go first (an image with
		// children cannot be removed), then the stand-ins.
		imgs, _ := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelRevision+"="+rev))})
		for _, im := range imgs {
			_, _ = cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
		for _, id := range standIns {
			// A build cache layer that another test's build shares can
			// keep a child alive for a while; the image is left (labelled
			// managed, so `gc` finds it), which is no failure of the cache
			// key this test is about.
			if _, err := cli.ImageRemove(ctx, id, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				t.Errorf("remove the stand-in %s: %v", id, err)
			}
		}
	})
	v1 := buildTestImage(t, cli, standIn, "FROM "+testImage+"\nRUN printf '#!/bin/sh\\necho stand-in 1\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3\n")

	m, err := sandbox.ParseImageMap(strings.NewReader(testImage+" = "+standIn+"\n"), "map")
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := New(Options{Client: cli, ImageMap: m})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(Options{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	standIns = append(standIns, v1)
	env := writeEnv(t, "FROM "+testImage+"\nRUN python3 > /python-says\n")
	spec := sandbox.BuildSpec{Task: "needs-python", Revision: rev, EnvironmentDir: env}

	first, err := mapped.EnsureImage(ctx, spec)
	if err != nil {
		t.Fatalf("mapped build: %v", err)
	}
	if first.Cached || !reflect.DeepEqual(first.Bases, []sandbox.BaseImage{{Ref: standIn, ID: v1}}) || len(first.Rewrites) != 1 || first.Rewrites[0].Rule != testImage {
		t.Fatalf("mapped build: %+v", first)
	}

	// The same task without the map: another key, a build against the real
	// base, which has no python3.
	_, err = plain.EnsureImage(ctx, spec)
	var be *sandbox.BuildError
	if !errors.As(err, &be) || be.Ref == first.Ref || !strings.Contains(err.Error(), "python3: not found") {
		t.Fatalf("build without the map: %v", err)
	}

	// The map again: cached.
	again, err := mapped.EnsureImage(ctx, spec)
	if err != nil || !again.Cached || again.ID != first.ID {
		t.Fatalf("mapped build again: %+v %v", again, err)
	}

	// The stand-in re-tagged to another image: a new build on it.
	v2 := buildTestImage(t, cli, standIn, "FROM "+testImage+"\nRUN printf '#!/bin/sh\\necho stand-in 2\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3\n")
	standIns = append(standIns, v2)
	if v2 == v1 {
		t.Fatal("the stand-in did not change")
	}
	second, err := mapped.EnsureImage(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if second.Cached || second.Ref == first.Ref || second.ID == first.ID || !reflect.DeepEqual(second.Bases, []sandbox.BaseImage{{Ref: standIn, ID: v2}}) {
		t.Fatalf("after the re-tag: %+v (first %+v)", second, first)
	}
	h, err := mapped.Start(ctx, sandbox.Spec{Image: second.Ref})
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Destroy(ctx, h)
	var out testutil.SyncBuffer
	if res, err := mapped.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"cat", "/python-says"}, Stdout: &out}); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if out.String() != "stand-in 2\n" {
		t.Fatalf("the build ran on %q", out.String())
	}

	// A base that is missing and cannot be pulled fails as a pull, naming it.
	env2 := writeEnv(t, "FROM proctor-test.invalid/none:1\n")
	_, err = plain.EnsureImage(ctx, sandbox.BuildSpec{Task: "missing-base", Revision: rev, EnvironmentDir: env2, Timeout: time.Minute})
	if !errors.As(err, &be) || !be.Pull || be.Ref != "proctor-test.invalid/none:1" {
		t.Fatalf("missing base: %v", err)
	}
}

// TestDockerTimeoutWhenSignalExecIsStopped: a root process that stops
// every process in the container (`kill -STOP -1`, as the verifier's exit
// hook does when the test script exits on the timeout's SIGTERM) also
// stops the exec that sends the timeout's signals; Exec must still return
// the timeout result instead of waiting for that exec's output forever.
// This is the exec path (an engine on another machine, see
// execPathDocker): the stopper never ends, so the SIGKILL exec cannot
// start either and Exec returns at its housekeeping bound, DestroyTimeout
// + Grace (61 s); after the verifier's one-shot stop, the SIGKILL exec
// ends everything killWait (10 s) after the SIGTERM. From this machine
// the signals need no exec (TestHostSignalsPassAStopper).
func TestDockerTimeoutWhenSignalExecIsStopped(t *testing.T) {
	t.Parallel()
	d := execPathDocker(t)
	ctx := context.Background()
	h := startLong(t, d)
	// The stopper ignores SIGTERM and stops every other process, again
	// and again, from before the timeout until SIGKILL.
	script := `sh -c "trap '' TERM; while :; do kill -STOP -1 2>/dev/null; done" & sleep 100000`
	type result struct {
		res sandbox.ExecResult
		err error
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Timeout: time.Second, Grace: time.Second})
		got <- result{res, err}
	}()
	select {
	case r := <-got:
		if r.err != nil || !r.res.TimedOut || r.res.ExitCode != sandbox.TimeoutExitCode {
			t.Fatalf("got %+v %v, want the timeout result", r.res, r.err)
		}
		t.Logf("Exec returned after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Minute): // far from the 61 s it takes (62-63 s on a loaded machine)
		t.Fatal("Exec still waits five minutes after its 1 s timeout")
	}
}

// slowWriter is a reader slower than the command: each write waits first,
// as an agent's output waits on the event log's backpressure.
type slowWriter struct {
	mu sync.Mutex
	n  int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(300 * time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

// TestDockerExecDeliversAllOutputToASlowReader: a command that prints fast
// and exits while the engine still holds much of its output loses none of
// it when the reader is slow (the drain waits while output flows or a
// write is in progress; it cuts only an idle stream held open).
func TestDockerExecDeliversAllOutputToASlowReader(t *testing.T) {
	t.Parallel()
	d, _ := newTestDocker(t, nil)
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	var w slowWriter
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"seq", "1", "60000"}, Stdout: &w})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n != 60000 {
		t.Errorf("%d lines delivered, want 60000", w.n)
	}
}

// TestSignalTermNotHeldByAStoppedExec: the exec that sends SIGTERM is
// waited for at most termWait when a process of the container stops it
// (the verifier's exit hook stops every process when the test script
// ends on that SIGTERM): the timeout goes on to the grace and SIGKILL,
// which ends the stopped exec too, instead of waiting killWait for it (a
// verifier of 2 s timed out after 13 s).
func TestSignalTermNotHeldByAStoppedExec(t *testing.T) {
	t.Parallel()
	d := execPathDocker(t)
	ctx := context.Background()
	h := startLong(t, d)
	// For 30 s a root process that ignores SIGTERM stops every other
	// process, the signal's exec among them, as soon as it starts. It
	// begins once the shell that started it (this exec's process) is gone:
	// a stopper that stopped that shell too would hold this exec instead.
	// The sleep beside it shows when it has begun: stopped, seen from the
	// engine's side, where nothing of the container can stop the look.
	// The stopper also waits until the sleep has exec'd (its comm is
	// sleep): a forked child is still the shell until then, and a stopper
	// that stopped it there left no sleep to see.
	execOK(t, d, h, `sleep 1000 >/dev/null 2>&1 & bash -c 'trap "" TERM; while kill -0 $1 2>/dev/null; do :; done; until [ "$(cat /proc/$2/comm 2>/dev/null)" = sleep ]; do :; done; while [ $SECONDS -lt 30 ]; do kill -STOP -1 2>/dev/null; done' stopper $$ $! >/dev/null 2>&1 &`)
	for deadline := time.Now().Add(time.Minute); !sleepStopped(t, d, h.State["container"]); {
		if time.Now().After(deadline) {
			top, _ := d.cli.ContainerTop(context.Background(), h.State["container"], []string{"-o", "pid,ppid,stat,args"})
			t.Fatalf("the stopper never stopped the sleep beside it: %v", top.Processes)
		}
	}
	// The wrong wait is killWait (10 s) for the stopped exec on top of the
	// engine's calls (create, attach, inspect); the right one is termWait
	// (1 s) on top of them. The bound is killWait itself: only an engine
	// that takes 9 s for those calls fails a right wait, and a wrong one
	// always fails.
	start := time.Now()
	if err := d.signalAs(ctx, h.State["container"], "0", "TERM"); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("SIGTERM's exec was waited for %v", el.Round(time.Millisecond))
	if el >= killWait {
		t.Fatalf("SIGTERM's exec was waited for %v, want termWait (%v) and the engine's calls, under killWait (%v)", el.Round(time.Millisecond), termWait, killWait)
	}
}

// sleepStopped reports whether a sleep process of container cid is
// stopped, as the engine lists the container's processes.
func sleepStopped(t *testing.T, d *Driver, cid string) bool {
	t.Helper()
	top, err := d.cli.ContainerTop(context.Background(), cid, []string{"-o", "pid,stat,comm"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range top.Processes {
		if len(p) == 3 && strings.HasPrefix(p[1], "T") && p[2] == "sleep" {
			return true
		}
	}
	return false
}
