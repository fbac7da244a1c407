package docker

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// The egress proxy's sidecar (DESIGN §6): `proctor proxy` in a container of
// its own, on the cell's internal network and on a network with a way out.
const (
	// ProxyImageRepo is the repository of the sidecar images, tagged with
	// the first 16 hex digits of the proctor binary's SHA-256.
	ProxyImageRepo = "proctor-proxy"
	// LabelRole marks the sidecar container (value "egress-proxy") beside
	// the run, cell and managed labels every container carries.
	LabelRole = "proctor.role"
	// proxyLog is the egress.jsonl file inside the sidecar, callLog its
	// model_calls.jsonl.
	proxyLog = "/egress.jsonl"
	callLog  = "/model_calls.jsonl"
	// proxyConfig is the sidecar's secrets file (sandbox.ProxyConfig,
	// mode 0600, removed by the proxy once read), upstreamCA the PEM it
	// trusts beside the system roots.
	proxyConfig = "/run/proctor/proxy.json"
	upstreamCA  = "/run/proctor/upstream-ca.pem"
	// proxyReady bounds the wait for the sidecar to listen.
	proxyReady = 30 * time.Second
	// proxyStop is the SIGTERM-to-SIGKILL grace of the sidecar in
	// EgressLog: the proxy closes its tunnels and writes their close
	// records.
	proxyStop = 10 * time.Second
)

// proxyImageCache remembers the sidecar image built for a binary (path,
// size and modification time), so the binary is hashed once per driver.
type proxyImageCache struct {
	mu  sync.Mutex
	key string
	ref string
}

// ProxyImage returns the sidecar image for the driver's proxy binary
// (Options.ProxyBinary, else the running executable), building it when it
// is missing: the binary copied to /proctor in an image FROM scratch when
// it is statically linked, FROM debian:bookworm-slim (which must exist
// locally) when it needs a dynamic loader. Nothing is pulled. The image is
// tagged proctor-proxy:<sha256 of the binary, 16 hex digits> and labelled
// proctor.managed, so it is built once per binary.
func (d *Driver) ProxyImage(ctx context.Context) (string, error) {
	bin := d.proxyBin
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("sandbox: docker: egress proxy image: %w", err)
		}
		bin = exe
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("sandbox: docker: egress proxy binary: %w", err)
	}
	key := bin + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" + fi.ModTime().String()
	d.proxyImg.mu.Lock()
	defer d.proxyImg.mu.Unlock()
	if d.proxyImg.key == key {
		return d.proxyImg.ref, nil
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("sandbox: docker: egress proxy binary: %w", err)
	}
	sum := sha256.Sum256(data)
	ref := ProxyImageRepo + ":" + hex.EncodeToString(sum[:])[:16]
	unlock := d.builds.lock(ref)
	defer unlock()
	var info sandbox.ImageInfo
	found, err := d.cached(ctx, ref, &info)
	if err != nil {
		return "", err
	}
	if !found {
		if err := d.buildProxyImage(ctx, ref, bin, data); err != nil {
			return "", err
		}
	}
	d.proxyImg.key, d.proxyImg.ref = key, ref
	return ref, nil
}

// buildProxyImage builds ref from the binary's bytes.
func (d *Driver) buildProxyImage(ctx context.Context, ref, bin string, data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("sandbox: docker: egress proxy binary %s is not a Linux executable: %w", bin, err)
	}
	base := "scratch"
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			base = "debian:bookworm-slim"
		}
	}
	if base != "scratch" {
		if _, err := d.cli.ImageInspect(ctx, base); err != nil {
			return fmt.Errorf("sandbox: docker: egress proxy binary %s is dynamically linked and its base %s is not here (build proctor with CGO_ENABLED=0): %w", bin, base, err)
		}
	}
	dockerfile := "FROM " + base + "\nCOPY proctor /proctor\nENTRYPOINT [\"/proctor\"]\n"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, []byte(dockerfile)}, {"proctor", 0o755, data}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := d.cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{ref}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true,
		Labels:  map[string]string{sandbox.LabelManaged: "1"},
		Version: build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("sandbox: docker: build %s: %w", ref, err)
	}
	var log bytes.Buffer
	msg, err := readJSONMessages(resp.Body, &log)
	resp.Body.Close()
	if err != nil || msg != "" {
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("sandbox: docker: build %s: %s", ref, msg)
	}
	d.log.Debug("egress proxy image built", "ref", ref, "base", base)
	return nil
}

// proxyAddr is the sidecar's address on an internal network: the last
// usable address of the subnet, away from the addresses the engine hands
// out from the bottom.
func proxyAddr(subnet netip.Prefix) netip.Addr {
	a := subnet.Masked().Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += 1<<(32-subnet.Bits()) - 2
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// ProxyLifetime is how long an egress sidecar serves before it exits on
// its own (`proctor proxy --lifetime`), unless its sandbox lives longer:
// a sidecar a killed proctor left behind does not serve forever, even
// before `proctor gc` removes it.
const ProxyLifetime = 4 * time.Hour

// proxyLifetime is the sidecar's lifetime for spec: ProxyLifetime, or the
// sandbox's own when longer (the proxy must outlive the solve it serves).
func proxyLifetime(spec sandbox.Spec) time.Duration {
	life := spec.Lifetime
	if life <= 0 {
		life = sandbox.DefaultLifetime
	}
	return max(ProxyLifetime, life)
}

// startProxy starts the egress proxy of spec as a sidecar container
// (ProxyImage, `proctor proxy --listen IP:ProxyPort --allow ENTRY...
// --egress-log /egress.jsonl --cell CELL --lifetime 4h0m0s`, see
// proxyLifetime) on the internal network netName
// at the last address of its subnet, joined to spec.Egress.Upstream (else
// Options.EgressNetwork, else the bridge) for its way out, with the sandbox's labels plus
// proctor.role=egress-proxy, every capability dropped, no-new-privileges,
// 256 MiB and 256 pids. It listens on its internal-network address only;
// Start waits (up to 30 s) until it does, and records "proxy" and
// "proxy_container" in the handle's State.
//
// It returns the sidecar's container id (also with an error, once the
// container was made, so the caller can remove it) and the proxy's
// ip:port.
func (d *Driver) startProxy(ctx context.Context, spec sandbox.Spec, netName string, subnet netip.Prefix, lbl map[string]string) (id, listen string, err error) {
	img, err := d.ProxyImage(ctx)
	if err != nil {
		return "", "", err
	}
	ip := proxyAddr(subnet)
	listen = netip.AddrPortFrom(ip, sandbox.ProxyPort).String()
	cmd := []string{"proxy", "--listen", listen, "--egress-log", proxyLog, "--cell", spec.CellID,
		"--lifetime", proxyLifetime(spec).String()}
	for _, a := range spec.Egress.Allow {
		cmd = append(cmd, "--allow", a)
	}
	// Secrets go in a file the proxy reads and removes, never on its
	// command line or in its environment (both show in docker inspect).
	var files []tarFile
	pc := sandbox.ProxyConfig{Upstream: d.upstream}
	if g := spec.Egress.Gateway; g != nil {
		if g.CA == nil {
			return "", "", fmt.Errorf("%w: a gateway without a CA", sandbox.ErrInvalidSpec)
		}
		pc.CACert, pc.CAKey, pc.Routes = g.CA.CertPEM, g.CA.KeyPEM, g.Routes
		cmd = append(cmd, "--model-log", callLog)
	}
	if spec.Egress.Gateway != nil || !d.upstream.IsZero() {
		b, err := json.Marshal(pc)
		if err != nil {
			return "", "", err
		}
		files = append(files, tarFile{proxyConfig, 0o600, b})
		cmd = append(cmd, "--config", proxyConfig)
	}
	if len(d.upstreamCA) > 0 {
		files = append(files, tarFile{upstreamCA, 0o644, d.upstreamCA})
		cmd = append(cmd, "--upstream-ca", upstreamCA)
	}
	clbl := map[string]string{LabelRole: "egress-proxy"}
	for k, v := range lbl {
		clbl[k] = v
	}
	pids := int64(256)
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(netName),
		Resources:   container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20, PidsLimit: &pids},
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
	}
	nc := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		netName: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip.String()}},
	}}
	created, err := d.cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: cmd, Labels: clbl}, hc, nc, nil, "")
	if err != nil {
		return "", "", fmt.Errorf("sandbox: docker: create the egress proxy: %w", err)
	}
	if len(files) > 0 {
		if err := d.writeFiles(ctx, created.ID, files); err != nil {
			return created.ID, "", fmt.Errorf("sandbox: docker: the egress proxy's configuration: %w", err)
		}
	}
	up := cmp.Or(spec.Egress.Upstream, d.egressNet, sandbox.NetworkBridge)
	if err := d.cli.NetworkConnect(ctx, up, created.ID, nil); err != nil {
		return created.ID, "", fmt.Errorf("sandbox: docker: connect the egress proxy to %s: %w", up, err)
	}
	if err := d.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return created.ID, "", fmt.Errorf("sandbox: docker: start the egress proxy: %w", err)
	}
	if err := d.waitListening(ctx, created.ID); err != nil {
		return created.ID, "", err
	}
	d.log.Debug("egress proxy started", "container", short(created.ID), "listen", listen, "upstream", up)
	return created.ID, listen, nil
}

// waitListening polls the sidecar's output for its "listening on" line.
func (d *Driver) waitListening(ctx context.Context, cid string) error {
	ctx, cancel := context.WithTimeout(ctx, proxyReady)
	defer cancel()
	interval := 5 * time.Millisecond
	for {
		out, err := d.containerOutput(ctx, cid)
		if err == nil && strings.Contains(out, "listening on") {
			return nil
		}
		ins, ierr := d.cli.ContainerInspect(ctx, cid)
		if ierr == nil && ins.State != nil && !ins.State.Running {
			return fmt.Errorf("sandbox: docker: the egress proxy exited (%d): %s", ins.State.ExitCode, strings.TrimSpace(out))
		}
		if ctx.Err() != nil {
			return fmt.Errorf("sandbox: docker: the egress proxy did not listen within %s: %s", proxyReady, strings.TrimSpace(out))
		}
		sleepCtx(ctx, interval)
		interval = min(interval*2, 200*time.Millisecond)
	}
}

// containerOutput returns a container's stdout and stderr so far.
func (d *Driver) containerOutput(ctx context.Context, cid string) (string, error) {
	rc, err := d.cli.ContainerLogs(ctx, cid, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", err
	}
	defer rc.Close()
	var out limitedBuffer
	_, err = stdcopy.StdCopy(&out, &out, rc)
	return out.String(), err
}

// EgressLog stops the egress proxy of a sandbox started with Spec.Egress
// (SIGTERM, SIGKILL after 10 s; the proxy closes its tunnels and records
// them first) and returns its egress.jsonl: one JSON line per decision
// (see proxylogger.JSONL). Call it once the agent's processes are gone;
// the proxy serves nothing afterwards. It may be called again (the same
// bytes) until Destroy. It returns nil, nil for a sandbox without a proxy.
func (d *Driver) EgressLog(ctx context.Context, h *sandbox.Handle) ([]byte, error) {
	cid := state(h, "proxy_container")
	if cid == "" {
		return nil, nil
	}
	secs := int(proxyStop / time.Second)
	if err := d.cli.ContainerStop(ctx, cid, container.StopOptions{Signal: "SIGTERM", Timeout: &secs}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: the egress proxy: %v", sandbox.ErrDestroyed, err)
		}
		return nil, fmt.Errorf("sandbox: docker: stop the egress proxy: %w", err)
	}
	rc, _, err := d.cli.CopyFromContainer(ctx, cid, proxyLog)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, nil // the proxy never wrote a line
		}
		return nil, fmt.Errorf("sandbox: docker: read the egress log: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("sandbox: docker: read the egress log: %w", err)
		}
		if hdr.Typeflag == tar.TypeReg {
			return io.ReadAll(tr)
		}
	}
}

// tarFile is one file written into a container by writeFiles.
type tarFile struct {
	path string
	mode int64
	data []byte
}

// writeFiles writes files (absolute paths, owned by root, parents created
// 0755) into container cid through the engine's copy API, which works on
// a container that is created and not started.
func (d *Driver) writeFiles(ctx context.Context, cid string, files []tarFile) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		rel := strings.TrimPrefix(f.path, "/")
		var parents []string
		for p := filepath.Dir(rel); p != "." && !dirs[p]; p = filepath.Dir(p) {
			parents = append([]string{p}, parents...)
			dirs[p] = true
		}
		for _, p := range parents {
			if err := tw.WriteHeader(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: f.mode, Size: int64(len(f.data)), Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return d.cli.CopyToContainer(ctx, cid, "/", &buf, container.CopyToContainerOptions{})
}

// installGatewayCA puts the run CA's certificate at
// sandbox.GatewayCAPath in container cid (created, not started) and, at
// sandbox.GatewayBundlePath, the image's system bundle (the first of
// sandbox.SystemBundles that is a regular file; none in a slim image)
// followed by the run CA's certificate.
func (d *Driver) installGatewayCA(ctx context.Context, cid string, g *sandbox.Gateway) error {
	if g.CA == nil {
		return fmt.Errorf("%w: a gateway without a CA", sandbox.ErrInvalidSpec)
	}
	var bundle []byte
	for _, p := range sandbox.SystemBundles {
		b, err := d.readCreated(ctx, cid, p, 16<<20)
		if err == nil && len(b) > 0 {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, g.CA.CertPEM...)
	err := d.writeFiles(ctx, cid, []tarFile{
		{sandbox.GatewayCAPath, 0o644, g.CA.CertPEM},
		{sandbox.GatewayBundlePath, 0o644, bundle},
	})
	if err != nil {
		return fmt.Errorf("sandbox: docker: install the gateway's CA: %w", err)
	}
	return nil
}

// readCreated reads a regular file of at most maxBytes from a container
// through the copy API (a symbolic link or a missing file is an error).
func (d *Driver) readCreated(ctx context.Context, cid, p string, maxBytes int64) ([]byte, error) {
	rc, _, err := d.cli.CopyFromContainer(ctx, cid, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return readOneRegular(rc, p, maxBytes)
}

// CallLog returns the model_calls.jsonl of the gateway of a sandbox
// started with Spec.Egress.Gateway: one JSON line per call (see
// proxylogger.CallJSONL). Call it after EgressLog, which stops the proxy
// and so closes its calls. It returns nil, nil for a sandbox without a
// proxy or a proxy that recorded no call.
func (d *Driver) CallLog(ctx context.Context, h *sandbox.Handle) ([]byte, error) {
	cid := state(h, "proxy_container")
	if cid == "" {
		return nil, nil
	}
	b, err := d.readCreated(ctx, cid, callLog, 256<<20)
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: docker: read the model call log: %w", err)
	}
	return b, nil
}
