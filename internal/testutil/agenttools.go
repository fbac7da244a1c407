package testutil

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// agentTools are the programs AgentToolsImage adds to python:3.11-slim.
var agentTools = []string{"node", "curl", "jq"}

// glibcLibs are the libraries every Debian image has in the same
// version as the host's; AgentToolsImage copies every other one.
var glibcLibs = regexp.MustCompile(`^(ld-linux.*|linux-vdso.*|libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so`)

// AgentToolsImage returns the tag of python:3.11-slim with this
// machine's node, curl and jq added (in /usr/local/bin) with the shared
// libraries they load apart from glibc's (in /usr/local/lib/agent-tools,
// registered with ldconfig): an image for agents written for Node's
// standard library or for bash with curl and jq, built without a
// network. It holds on a Debian 12 host, the image's own release (the
// machine scripts/setup.sh prepares; `make setup-node` installs the
// three). The tag names a hash of the files copied,
// so the image is built once per set of tools and reused. A missing tool
// or a failed build makes the test unavailable (skipped, failed under
// CI).
func AgentToolsImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	RequireImage(t, cli, "python:3.11-slim")
	files := map[string]string{} // path in the image → host file
	for _, name := range agentTools {
		p, err := exec.LookPath(name)
		if err != nil {
			unavailable(t, "agent tools image: %s is not installed", name)
			return ""
		}
		if p, err = filepath.EvalSymlinks(p); err != nil {
			unavailable(t, "agent tools image: %v", err)
			return ""
		}
		files["usr/local/bin/"+name] = p
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			unavailable(t, "agent tools image: ldd %s: %v", p, err)
			return ""
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 3 || f[1] != "=>" || !strings.HasPrefix(f[2], "/") || glibcLibs.MatchString(f[0]) {
				continue
			}
			real, err := filepath.EvalSymlinks(f[2])
			if err != nil {
				unavailable(t, "agent tools image: %v", err)
				return ""
			}
			files["usr/local/lib/agent-tools/"+f[0]] = real
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		st, err := os.Stat(files[n])
		if err != nil {
			unavailable(t, "agent tools image: %v", err)
			return ""
		}
		fmt.Fprintf(h, "%s %s %d %d\n", n, files[n], st.Size(), st.ModTime().UnixNano())
	}
	tag := "proctor-test/agent-tools:" + hex.EncodeToString(h.Sum(nil))[:16]
	ctx := context.Background()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dockerfile := "FROM python:3.11-slim\nCOPY usr /usr\nRUN echo /usr/local/lib/agent-tools > /etc/ld.so.conf.d/agent-tools.conf && ldconfig && node --version && curl --version && jq --version\n"
	add := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body))}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	err := add("Dockerfile", 0o644, []byte(dockerfile))
	for _, n := range names {
		if err != nil {
			break
		}
		var b []byte
		if b, err = os.ReadFile(files[n]); err == nil {
			err = add(n, 0o755, b)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatalf("agent tools image: %v", err)
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Version: build.BuilderV1})
	if err != nil {
		unavailable(t, "agent tools image: build: %v", err)
		return ""
	}
	log, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		unavailable(t, "agent tools image: build %s: %v\n%s", tag, err, log)
		return ""
	}
	return tag
}
