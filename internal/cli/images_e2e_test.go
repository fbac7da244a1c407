package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/artifact"
	"github.com/proctor-eval/proctor/pkg/events"
)

// writeTask writes a Harbor task: the Dockerfile, an oracle that does
// nothing, and a test script.
func writeTask(t *testing.T, root, name, dockerfile, test string) {
	t.Helper()
	for p, body := range map[string]string{
		"task.toml":              "version = \"1.0\"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 30.0\n",
		"instruction.md":         "Nothing to do.\n",
		"environment/Dockerfile": dockerfile,
		"solution/solve.sh":      "#!/bin/bash\ntrue\n",
		"tests/test.sh":          "#!/bin/bash\nmkdir -p /logs/verifier\n" + test,
	} {
		p = filepath.Join(root, name, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writeTar writes a tar archive of one file.
func writeTar(w io.Writer, name, body string) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, body); err != nil {
		return err
	}
	return tw.Close()
}

// buildStandIn builds a test-unique image FROM debian:bookworm-slim with a
// python3 that answers, and returns its tag.
func buildStandIn(t *testing.T, cli *client.Client) string {
	t.Helper()
	tag := "proctor-test/with-python3:" + strings.ToLower(events.NewID())
	dockerfile := "FROM debian:bookworm-slim\nRUN printf '#!/bin/sh\\necho Python 3.99 stand-in\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3\n"
	var tarball bytes.Buffer
	if err := writeTar(&tarball, "Dockerfile", dockerfile); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.ImageBuild(context.Background(), &tarball, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if _, err := cli.ImageInspect(context.Background(), tag); err != nil {
		t.Fatalf("build the stand-in: %v\n%s", err, out)
	}
	return tag
}

// TestImageMapCacheAndBuildFailures runs the same tasks with an image map
// and then without it, through the whole pipeline:
//   - a task needing python3 passes on the mapped base and fails on the real
//     one (the image cache is keyed on what the build used);
//   - a build that fails ends its row's error with the build's own last
//     lines, with build_sec and a non-zero elapsed_sec, and a plain build.log;
//   - rules no image used are listed in the artifact and on stderr.
func TestImageMapCacheAndBuildFailures(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "debian:bookworm-slim")
	setenv(t, "PROCTOR_HOME", t.TempDir())
	root := t.TempDir()
	writeTask(t, root, "needs-python", "FROM debian:bookworm-slim\nWORKDIR /app\n",
		"if python3 --version >&2; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
	writeTask(t, root, "broken-build", "FROM debian:bookworm-slim\nRUN printf '\\033[31mE: no such package foo\\033[0m\\n' >&2; exit 100\n",
		"echo 1 > /logs/verifier/reward.txt\n")
	standIn := buildStandIn(t, cli)
	var revisions []string
	t.Cleanup(func() {
		ctx := context.Background()
		for _, rev := range revisions {
			imgs, _ := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "proctor.revision="+rev))})
			for _, im := range imgs {
				_, _ = cli.ImageRemove(ctx, im.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			}
		}
		if _, err := cli.ImageRemove(ctx, standIn, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove %s: %v", standIn, err)
		}
	})
	mapFile := filepath.Join(t.TempDir(), "images.map")
	if err := os.WriteFile(mapFile, []byte("debian:bookworm-slim = "+standIn+"\npython:* = proctor/python:*\nghcr.io/ = mirror.local/ghcr/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) (*artifact.Artifact, map[string]artifact.Result, string) {
		t.Helper()
		out := t.TempDir()
		js := filepath.Join(out, "a.json")
		var stdout, stderr bytes.Buffer
		args := append([]string{"tasks", "run", "--tasks-root", root, "--all", "--harnesses", "oracle", "--output-dir", out, "--out-json", js}, extra...)
		if code := mainT(t, args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
		}
		a, err := artifact.Read(js)
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]artifact.Result{}
		for _, r := range a.Results {
			rows[r.Task] = r
			if !strings.Contains(strings.Join(revisions, " "), r.TaskRevision) {
				revisions = append(revisions, r.TaskRevision)
			}
		}
		return a, rows, stderr.String()
	}

	a, rows, stderr := run("--image-map", mapFile)
	if r := rows["needs-python"]; r.Outcome != artifact.OutcomePassed {
		t.Fatalf("with the map: %+v", r)
	}
	b := rows["broken-build"]
	if b.Outcome != artifact.OutcomeErrored || b.ErrorClass != "build" || !strings.HasSuffix(b.Error, "returned a non-zero code: 100\nE: no such package foo") {
		t.Errorf("failed build row: %q", b.Error)
	}
	if b.Metrics.BuildSec == nil || *b.Metrics.BuildSec <= 0 || b.ElapsedSec < *b.Metrics.BuildSec {
		t.Errorf("failed build: build_sec %v, elapsed_sec %v", b.Metrics.BuildSec, b.ElapsedSec)
	}
	logText, err := os.ReadFile(filepath.Join(b.OutputDir, "build.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logText), "\nE: no such package foo\n") || bytes.ContainsAny(logText, "\x1b\r") {
		t.Errorf("build.log is not plain text: %q", logText)
	}
	if want := "ghcr.io/,python:*"; strings.Join(a.Run.ImageMapUnused, ",") != want {
		t.Errorf("image_map_unused %q, want %s", a.Run.ImageMapUnused, want)
	}
	if !strings.Contains(stderr, "warning: --image-map: 2 of 3 rules matched no image of this run: ghcr.io/, python:*") {
		t.Errorf("stderr: %s", stderr)
	}

	// Without the map: the real base, which has no python3.
	a, rows, stderr = run()
	if r := rows["needs-python"]; r.Outcome != artifact.OutcomeFailed {
		t.Fatalf("without the map the task ran on the mapped image: %+v", r)
	}
	if a.Run.ImageMap != nil || a.Run.ImageMapUnused != nil || strings.Contains(stderr, "warning: --image-map") {
		t.Errorf("no map: %v %v %s", a.Run.ImageMap, a.Run.ImageMapUnused, stderr)
	}
}
