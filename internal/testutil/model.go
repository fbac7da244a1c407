package testutil

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/pkg/llmtest"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// InternalTestNetwork is TestNetwork made --internal: it has no way out,
// so whatever a test reaches through it is a container of the test, never
// a real host.
func InternalTestNetwork(t testing.TB, cli *client.Client) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "proctor-test-" + hex.EncodeToString(b)
	if _, err := cli.NetworkCreate(context.Background(), name, network.CreateOptions{Driver: "bridge", Internal: true,
		Labels: map[string]string{LabelTest: t.Name()}}); err != nil {
		t.Fatalf("create test network: %v", err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), name) })
	return name
}

// ModelHost is a scripted model served over HTTPS by a container of the
// test (FakeModelHost).
type ModelHost struct {
	// Alias is its host name on the test's network; BaseURL is
	// https://Alias.
	Alias, BaseURL string
	// CAFile is the PEM of the test-made CA that signed its certificate
	// (for --upstream-ca, PROCTOR_UPSTREAM_CA); CA is that CA.
	CAFile string
	CA     *tlsca.CA
	dir    string
}

// Requests returns the requests the model got so far.
func (m *ModelHost) Requests() []llmtest.Request {
	b, _ := os.ReadFile(filepath.Join(m.dir, "requests.jsonl"))
	var out []llmtest.Request
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r llmtest.Request
		if json.Unmarshal([]byte(l), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// FakeModelHost runs `proctor serve fake-model` with script over HTTPS on
// port 443 in a container (debian:bookworm-slim and the static proctor
// binary) on the test's network net with the DNS alias alias, its
// certificate for alias signed by a CA the test makes here, so a proxy on
// net reaches it by a real-looking name and verifies it against CAFile.
// It waits (up to 60 s) until the model listens; the container is removed
// when the test ends.
func FakeModelHost(t testing.TB, cli *client.Client, net, alias, script string) *ModelHost {
	t.Helper()
	if _, err := llmtest.ParseScript([]byte(script)); err != nil {
		t.Fatal(err)
	}
	RequireImage(t, cli, "debian:bookworm-slim")
	bin := ProctorBinary(t)
	ca, err := tlsca.New("proctor test model CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := tlsca.ServerCert(ca, alias)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := &ModelHost{Alias: alias, BaseURL: "https://" + alias, CA: ca, CAFile: filepath.Join(dir, "ca.pem"), dir: dir}
	for name, b := range map[string][]byte{"script.yaml": []byte(script), "cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: "debian:bookworm-slim", Labels: map[string]string{LabelTest: t.Name()},
		Cmd: []string{"/proctor", "serve", "fake-model", "--script", "/m/script.yaml", "--listen", "0.0.0.0:443",
			"--tls-cert", "/m/cert.pem", "--tls-key", "/m/key.pem", "--requests", "/m/requests.jsonl"},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(net), Binds: []string{bin + ":/proctor:ro", dir + ":/m"}},
		&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{net: {Aliases: []string{alias}}}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		rc, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
		if err == nil {
			b := new(strings.Builder)
			_, _ = bufio.NewReader(rc).WriteTo(b)
			rc.Close()
			if strings.Contains(b.String(), "listening on") {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake model never listened")
		}
		time.Sleep(100 * time.Millisecond) // a poll interval under a deadline
	}
}
