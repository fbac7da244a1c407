package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// The real key of the gateway tests; its JSON-escaped form differs.
const gatewayKey = `sk-ant-gw-"real"\-7c1e`

const gatewayScript = `
model: claude-sonnet-4-5
replies:
  - text: "hi"
    usage: {input_tokens: 321, output_tokens: 12, cache_read_input_tokens: 40, cache_creation_input_tokens: 5}
after: repeat
`

// pyHostile is an agent that looks for the key everywhere it can from
// inside (its environment, every process's environ and cmdline, the
// files of /agent-output, /run and HOME, the proxy's ports and answers,
// a request that would reflect it) and prints all it finds: the test
// greps the output. Then it calls the model through the gateway with the
// placeholder it was given and prints the answer.
const pyHostile = `import os,sys,glob,socket,ssl,json,urllib.request
proxy=os.environ["HTTPS_PROXY"].split("//")[1]
ph,ip,port=os.environ["ANTHROPIC_API_KEY"],proxy.split(":")[0],int(proxy.split(":")[1])
print("ENV",json.dumps(dict(os.environ)))
for p in glob.glob("/proc/*/environ")+glob.glob("/proc/*/cmdline"):
    try: print("PROC",p,open(p,"rb").read())
    except Exception as e: print("PROC",p,e)
for d in ["/agent-output","/run","/tmp","/root"]:
    for root,_,files in os.walk(d):
        for f in files:
            try: print("FILE",os.path.join(root,f),open(os.path.join(root,f),"rb").read()[:100000])
            except Exception as e: print("FILE",f,e)
def raw(payload,p=port):
    try:
        s=socket.create_connection((ip,p),timeout=5); s.sendall(payload); b=b""
        s.settimeout(5)
        while True:
            c=s.recv(65536)
            if not c: break
            b+=c
        return b
    except Exception as e: return repr(e).encode()
for pl in [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /debug/pprof/heap HTTP/1.1\r\nHost: x\r\n\r\n",
           ("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n"%(proxy,proxy)).encode(),
           ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n"%(proxy,proxy)).encode(),
           ("GET http://MODEL:443/v1/messages HTTP/1.1\r\nHost: MODEL:443\r\nx-api-key: %s\r\n\r\n"%ph).encode(),
           b"\x16\x03\x01\x00\x05hello"]:
    print("PROXY",pl[:60],raw(pl))
for p in [22,80,443,2375,6060,8080,9090]:
    print("PORT",p,raw(b"GET / HTTP/1.0\r\n\r\n",p))
req=urllib.request.Request("https://MODEL/v1/messages",data=json.dumps({"model":"m","messages":[{"role":"user","content":"hi "+ph}]}).encode(),
    headers={"x-api-key":ph,"content-type":"application/json","anthropic-version":"2023-06-01"})
print("MODEL",urllib.request.urlopen(req,timeout=20).read().decode())
`

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// forms are the ways a secret may be written down.
func forms(secret string) []string {
	esc, _ := json.Marshal(secret)
	return []string{secret, string(esc[1 : len(esc)-1]), base64.StdEncoding.EncodeToString([]byte(secret))}
}

// assertNoSecret fails when what holds any form of a secret.
func assertNoSecret(t *testing.T, where string, b []byte, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		for _, f := range forms(s) {
			if bytes.Contains(b, []byte(f)) {
				t.Errorf("%s holds %q", where, f)
			}
		}
	}
}

// export returns every file of a container's filesystem, concatenated.
func export(t *testing.T, cli *client.Client, cid string) []byte {
	t.Helper()
	rc, err := cli.ContainerExport(context.Background(), cid)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var all bytes.Buffer
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(h.Name + "\n")
		_, _ = io.Copy(&all, tr)
	}
	return all.Bytes()
}

func inspectJSON(t *testing.T, cli *client.Client, cid string) []byte {
	t.Helper()
	ins, err := cli.ContainerInspect(context.Background(), cid)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(ins)
	return b
}

// TestGatewayKeepsTheKeyOutsideTheSandbox runs a hostile agent (as root,
// stronger than the agent's uid) in a sandbox whose egress proxy is the
// model gateway, with the scripted model over HTTPS under a name on an
// internal network the test made: the agent finds the key nowhere it can
// look (its environment, /proc, its files, the proxy's answers on every
// port), while its request with the placeholder reaches the model with
// the real key; the key is in neither container's inspect nor their
// filesystems (the proxy removed its config file), nor in the proxy's
// logs; the call is recorded with the scripted usage.
func TestGatewayKeepsTheKeyOutsideTheSandbox(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	upNet := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, upNet, "llm.gateway.test", gatewayScript)
	d, err := New(Options{Client: cli, ProxyBinary: testutil.ProctorBinary(t), UpstreamCA: model.CA.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := tlsca.New("run CA")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := providers.Lookup("anthropic")
	route, err := providers.Resolve(p, func(k string) string {
		return map[string]string{"ANTHROPIC_API_KEY": gatewayKey, "ANTHROPIC_BASE_URL": model.BaseURL}[k]
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{
		RunID: "gw-" + randomHex(4), CellID: "t/docker-claude/-/0", Image: "python:3.11-slim", Network: sandbox.NetworkInternal,
		Lifetime: 5 * time.Minute,
		Egress:   &sandbox.Egress{Allow: route.Hosts, Upstream: upNet, Gateway: &sandbox.Gateway{CA: ca, Routes: []providers.Route{route}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	ce := sandbox.CAEnv(h)
	if ce["NODE_EXTRA_CA_CERTS"] != sandbox.GatewayCAPath || ce["SSL_CERT_FILE"] != sandbox.GatewayBundlePath {
		t.Fatalf("CA env %v", ce)
	}
	// The bundle is the image's roots and the run CA.
	bundle, err := d.ReadFile(ctx, h, sandbox.GatewayBundlePath, 1<<20)
	if err != nil || !bytes.HasSuffix(bundle, ca.CertPEM) || len(bundle) < 10*len(ca.CertPEM) {
		t.Fatalf("bundle of %d bytes (%v): want the image's roots and the run CA", len(bundle), err)
	}
	env := map[string]string{"ANTHROPIC_API_KEY": route.AgentEnv()["ANTHROPIC_API_KEY"]}
	for k, v := range sandbox.ProxyEnv(h) {
		env[k] = v
	}
	for k, v := range ce {
		env[k] = v
	}
	var out bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"python3", "-c", strings.ReplaceAll(pyHostile, "MODEL", model.Alias)},
		Env: env, Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("hostile agent: exit %d %v\n%s", res.ExitCode, err, tail(out.String()))
	}
	if !strings.Contains(out.String(), `"type": "message"`) && !strings.Contains(out.String(), `"type":"message"`) {
		t.Fatalf("the model did not answer through the gateway:\n%s", tail(out.String()))
	}
	assertNoSecret(t, "what the agent found", out.Bytes(), gatewayKey)
	reqs := model.Requests()
	if len(reqs) != 1 || reqs[0].APIKey != gatewayKey || !strings.Contains(string(reqs[0].Body), route.Credentials[0].Placeholder) {
		t.Fatalf("the model got %+v", reqs)
	}
	el, err := d.EgressLog(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	calls, err := d.CallLog(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(calls), []byte("\n"))
	var m map[string]any
	_ = json.Unmarshal(lines[len(lines)-1], &m)
	if m["provider"] != "anthropic" || m["input_tokens"] != 321.0 || m["output_tokens"] != 12.0 || m["cache_read_tokens"] != 40.0 || m["cache_write_tokens"] != 5.0 || m["status"] != 200.0 {
		t.Errorf("model call %s", lines[len(lines)-1])
	}
	assertNoSecret(t, "egress.jsonl", el, gatewayKey)
	assertNoSecret(t, "model_calls.jsonl", calls, gatewayKey)
	assertNoSecret(t, "the sandbox's inspect", inspectJSON(t, cli, h.State["container"]), gatewayKey)
	assertNoSecret(t, "the proxy's inspect", inspectJSON(t, cli, h.State["proxy_container"]), gatewayKey)
	assertNoSecret(t, "the sandbox's files", export(t, cli, h.State["container"]), gatewayKey)
	assertNoSecret(t, "the proxy's files", export(t, cli, h.State["proxy_container"]), gatewayKey, string(ca.KeyPEM))
	assertNoSecret(t, "the sandbox's files", export(t, cli, h.State["container"]), string(ca.KeyPEM))
	logs, _ := d.containerOutput(ctx, h.State["proxy_container"])
	assertNoSecret(t, "the proxy's output", []byte(logs), gatewayKey)
}

// pyParent is a test-made corporate proxy: CONNECT only, with Basic
// credentials required (407 otherwise), every request line logged to
// stdout.
const pyParent = `import socket,threading,base64,os,select
want="Basic "+base64.b64encode(os.environ["CRED"].encode()).decode()
os.environ.pop("CRED")
def pipe(a,b):
    try:
        while True:
            r,_,_=select.select([a,b],[],[],60)
            if not r: return
            for s in r:
                d=s.recv(65536)
                if not d: return
                (b if s is a else a).sendall(d)
    except OSError: pass
def serve(c):
    h=b""
    while b"\r\n\r\n" not in h:
        d=c.recv(4096)
        if not d: return
        h+=d
    lines=h.split(b"\r\n\r\n")[0].decode().split("\r\n")
    hdr={l.split(":",1)[0].lower():l.split(":",1)[1].strip() for l in lines[1:] if ":" in l}
    print("REQ",lines[0],"auth-ok" if hdr.get("proxy-authorization")==want else "auth-bad",flush=True)
    if hdr.get("proxy-authorization")!=want:
        c.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"); c.close(); return
    host,port=lines[0].split()[1].rsplit(":",1)
    u=socket.create_connection((host,int(port)))
    c.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    pipe(c,u); c.close(); u.close()
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(("0.0.0.0",3128)); s.listen(64)
print("listening on 3128",flush=True)
while True:
    c,_=s.accept(); threading.Thread(target=serve,args=(c,),daemon=True).start()
`

// startParentProxy runs pyParent in a container on net with alias and
// returns its id.
func startParentProxy(t *testing.T, cli *client.Client, net, alias, cred string) string {
	t.Helper()
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: "python:3.11-slim", Cmd: []string{"python3", "-u", "-c", pyParent},
		Env: []string{"CRED=" + cred}, Labels: map[string]string{testutil.LabelTest: t.Name()}},
		&container.HostConfig{NetworkMode: container.NetworkMode(net)},
		&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{net: {Aliases: []string{alias}}}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		out, _ := d.containerOutput(ctx, c.ID)
		if strings.Contains(out, "listening on") {
			return c.ID
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parent proxy did not listen: %s", out)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval under a deadline
	}
}

// TestGatewayChainsTheUpstreamProxy puts a corporate proxy that wants
// credentials between the sidecar and the model: the model is reached
// through it with the credentials, and they are in no container's
// inspect, no file, no log and nothing the agent can read.
func TestGatewayChainsTheUpstreamProxy(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, "python:3.11-slim")
	upNet := testutil.InternalTestNetwork(t, cli)
	model := testutil.FakeModelHost(t, cli, upNet, "llm.chain.test", gatewayScript)
	const user, pass = "corp-user", "corp-p4ss-w0rd"
	parent := startParentProxy(t, cli, upNet, "proxy.corp.test", user+":"+pass)
	d, err := New(Options{Client: cli, ProxyBinary: testutil.ProctorBinary(t), UpstreamCA: model.CA.CertPEM,
		UpstreamProxy: sandbox.UpstreamProxy{HTTPSProxy: "http://" + user + ":" + pass + "@proxy.corp.test:3128"}})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsca.New("run CA")
	p, _ := providers.Lookup("anthropic")
	route, _ := providers.Resolve(p, func(k string) string {
		return map[string]string{"ANTHROPIC_API_KEY": gatewayKey, "ANTHROPIC_BASE_URL": model.BaseURL}[k]
	}, true)
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{
		RunID: "gw-" + randomHex(4), CellID: "t/docker-claude/-/0", Image: "python:3.11-slim", Network: sandbox.NetworkInternal,
		Lifetime: 5 * time.Minute,
		Egress:   &sandbox.Egress{Allow: route.Hosts, Upstream: upNet, Gateway: &sandbox.Gateway{CA: ca, Routes: []providers.Route{route}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	env := map[string]string{"ANTHROPIC_API_KEY": route.AgentEnv()["ANTHROPIC_API_KEY"]}
	for k, v := range sandbox.ProxyEnv(h) {
		env[k] = v
	}
	for k, v := range sandbox.CAEnv(h) {
		env[k] = v
	}
	var out bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"python3", "-c", strings.ReplaceAll(pyHostile, "MODEL", model.Alias)},
		User: "10001:10001", Env: env, Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: exit %d %v\n%s", res.ExitCode, err, tail(out.String()))
	}
	plog, _ := d.containerOutput(ctx, parent)
	if !strings.Contains(plog, "REQ CONNECT llm.chain.test:443 HTTP/1.1 auth-ok") {
		t.Errorf("the model was not reached through the upstream proxy with its credentials:\n%s", plog)
	}
	if reqs := model.Requests(); len(reqs) != 1 || reqs[0].APIKey != gatewayKey {
		t.Errorf("the model got %+v", reqs)
	}
	el, _ := d.EgressLog(ctx, h)
	calls, _ := d.CallLog(ctx, h)
	plogs, _ := d.containerOutput(ctx, h.State["proxy_container"])
	for where, b := range map[string][]byte{
		"what the agent found": out.Bytes(), "egress.jsonl": el, "model_calls.jsonl": calls, "the proxy's output": []byte(plogs),
		"the proxy's inspect": inspectJSON(t, cli, h.State["proxy_container"]), "the sandbox's inspect": inspectJSON(t, cli, h.State["container"]),
		"the proxy's files": export(t, cli, h.State["proxy_container"]), "the sandbox's files": export(t, cli, h.State["container"]),
	} {
		assertNoSecret(t, where, b, pass, user+":"+pass, gatewayKey)
	}
}

// TestBuildGetsTheOperatorsProxy: an image build sees the operator's proxy
// variables as the Docker CLI's proxies.default passes them (without the
// Dockerfile declaring them), while its log shows the URL without the
// credentials and the image's history holds none of them.
func TestBuildGetsTheOperatorsProxy(t *testing.T) {
	t.Parallel()
	cli := testutil.Docker(t)
	testutil.RequireImage(t, cli, testImage)
	const proxy = "http://corp-user:corp-s3cret@proxy.corp.test:3128"
	d, err := New(Options{Client: cli, BuildProxy: map[string]string{"HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": "llm.internal", "no_proxy": "llm.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	env := writeEnv(t, "FROM "+testImage+"\nRUN echo \"proxy is $HTTPS_PROXY, bypass $no_proxy\" && test -n \"$https_proxy\" && echo ok > /built\n")
	var log testutil.SyncBuffer
	b := sandbox.BuildSpec{Task: "behind-a-proxy", Revision: randomHex(32), EnvironmentDir: env, Log: &log}
	removeRevisionImages(t, cli, b.Revision)
	info, err := d.EnsureImage(context.Background(), b)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "proxy is http://REDACTED:REDACTED@proxy.corp.test:3128, bypass llm.internal") {
		t.Errorf("build log:\n%s", log.String())
	}
	hist, err := cli.ImageHistory(context.Background(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := json.Marshal(hist)
	ins, _ := cli.ImageInspect(context.Background(), info.ID)
	ib, _ := json.Marshal(ins)
	for where, b := range map[string][]byte{"build log": []byte(log.String()), "history": hb, "image": ib} {
		assertNoSecret(t, where, b, "corp-s3cret", "corp-user")
	}
}
