package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	// Roots for a proxy sidecar built FROM scratch, which has no system
	// bundle: used only when the system has none.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/tlsca"
	"github.com/proctor-eval/proctor/services/proxylogger"
)

// Environment variables of the egress proxy's sidecar (DESIGN §6).
const (
	// EnvProxyBinary names the proctor binary the sidecar image is built
	// from; unset, the running proctor (best built with CGO_ENABLED=0, as
	// `make build` does).
	EnvProxyBinary = "PROCTOR_PROXY_BINARY"
	// EnvEgressNetwork names the Docker network the sidecar joins for its
	// way out; unset, the default bridge.
	EnvEgressNetwork = "PROCTOR_EGRESS_NETWORK"
	// EnvCgroupRoot names where the engine host's cgroup filesystem is
	// mounted when proctor runs in a container (docker.Options.CgroupRoot);
	// unset, /sys/fs/cgroup.
	EnvCgroupRoot = "PROCTOR_CGROUP_ROOT"
	// EnvCopyAPIOnly, set to 1, moves files in and out of containers only
	// through the engine's copy API (docker.Options.CopyAPIOnly), never
	// through a container's root directory on this machine.
	EnvCopyAPIOnly = "PROCTOR_COPY_API_ONLY"
	// EnvEngineSlack is the time in seconds the Docker engine gets to
	// answer a request beyond the budget the request serves
	// (docker.Options.EngineSlack); unset, 60.
	EnvEngineSlack = "PROCTOR_ENGINE_SLACK"
	// EnvUpstreamCA names a PEM file of certificates the egress proxy
	// trusts beside the system roots when its model gateway verifies an
	// upstream (a private gateway, a test endpoint).
	EnvUpstreamCA = "PROCTOR_UPSTREAM_CA"
)

// upstream is what the operator's environment says of the way out:
// the proxy the sidecar chains through, the extra roots it trusts, and
// the proxy variables of image builds.
type upstream struct {
	proxy sandbox.UpstreamProxy
	ca    []byte
	build map[string]string
}

// buildProxyVars are the proxy variables a build gets, as the Docker
// CLI's proxies.default passes them.
var buildProxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "ALL_PROXY", "NO_PROXY"}

// upstreamFromEnv reads the operator's HTTP_PROXY, HTTPS_PROXY and
// NO_PROXY (either case, upper first) and EnvUpstreamCA through getenv.
// The proxies are chained by the egress proxy's sidecar and passed to
// image builds, credentials included (they never reach a sandbox); the
// hosts of the providers' base-URL variables (a model gateway) join
// no_proxy for both. A proxy on a loopback address cannot be reached
// from a container: it is left out with a warning. A CA file that does
// not hold a PEM certificate is an error naming it.
func upstreamFromEnv(getenv func(string) string, warn func(string)) (upstream, error) {
	var u upstream
	get := func(k string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		return strings.TrimSpace(getenv(strings.ToLower(k)))
	}
	usable := func(k, v string) string {
		if v == "" {
			return ""
		}
		raw := v
		if !strings.Contains(raw, "://") {
			raw = "http://" + raw
		}
		pu, err := url.Parse(raw)
		if err != nil || pu.Hostname() == "" {
			warn(fmt.Sprintf("%s is not a proxy URL with a host: not used", k))
			return ""
		}
		h := pu.Hostname()
		if ip := net.ParseIP(h); h == "localhost" || ip != nil && ip.IsLoopback() {
			warn(fmt.Sprintf("%s=%s is a loopback address, which from a container is the container itself: not chained by the egress proxy nor given to builds", k, proxylogger.Redact(raw)))
			return ""
		}
		return raw
	}
	u.proxy.HTTPProxy = usable("HTTP_PROXY", get("HTTP_PROXY"))
	u.proxy.HTTPSProxy = usable("HTTPS_PROXY", get("HTTPS_PROXY"))
	var noProxy []string
	if v := get("NO_PROXY"); v != "" {
		noProxy = append(noProxy, v)
	}
	for _, p := range providers.All() {
		if b := getenv(p.BaseURLEnv); b != "" {
			if bu, err := url.Parse(b); err == nil && bu.Hostname() != "" {
				noProxy = append(noProxy, bu.Hostname())
			}
		}
	}
	if !u.proxy.IsZero() {
		u.proxy.NoProxy = strings.Join(noProxy, ",")
		u.build = map[string]string{}
		for _, k := range buildProxyVars {
			v := get(k)
			switch k {
			case "HTTP_PROXY":
				v = u.proxy.HTTPProxy
			case "HTTPS_PROXY":
				v = u.proxy.HTTPSProxy
			case "NO_PROXY":
				v = u.proxy.NoProxy
			default:
				v = usable(k, v)
			}
			if v != "" {
				u.build[k], u.build[strings.ToLower(k)] = v, v
			}
		}
	}
	if f := getenv(EnvUpstreamCA); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return u, fmt.Errorf("%s: %w", EnvUpstreamCA, err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return u, fmt.Errorf("%s=%s holds no PEM certificate", EnvUpstreamCA, f)
		}
		u.ca = b
	}
	return u, nil
}

func newProxy(g *globals) *cobra.Command {
	var listen, egressLog, cell, config, upstreamCA, modelLog string
	var allow []string
	var lifetime time.Duration
	cmd := &cobra.Command{
		Use:   "proxy --listen ADDR --allow host[:port],... [--egress-log FILE]",
		Short: "Run the allowlisting egress proxy (the proxy-logger) in the foreground",
		Long: `Serve the proxy-logger of DESIGN §6 on ADDR until SIGINT or SIGTERM: CONNECT
host:port and plain-HTTP requests only to the --allow entries (host or
host:port, bare host = port 443, "private:" before an entry whose name may
resolve to a private address), every decision appended to --egress-log as
one JSON line. Upstreams that resolve to loopback or link-local addresses
are refused. It prints "listening on ADDR" once it accepts connections.
With --lifetime it exits on its own (status 0) when that much time has
passed, as a cell's sidecar does, so one left behind by a proctor that was
killed does not serve forever.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listen == "" {
				return usageError{errors.New("proxy needs --listen ADDR")}
			}
			pol, err := proxylogger.ParsePolicy(allow)
			if err != nil {
				return usageError{fmt.Errorf("--allow: %w", err)}
			}
			cfg := proxylogger.Config{Policy: pol, Cell: cell, Logger: g.logger()}
			if err := proxyGateway(&cfg, config, upstreamCA); err != nil {
				return err
			}
			var jl *proxylogger.JSONL
			if egressLog != "" {
				f, err := os.OpenFile(egressLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return fmt.Errorf("--egress-log: %w", err)
				}
				defer f.Close()
				jl = proxylogger.NewJSONL(f)
				cfg.Sink = jl.Record
			}
			var cl *proxylogger.CallJSONL
			if modelLog != "" {
				f, err := os.OpenFile(modelLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return fmt.Errorf("--model-log: %w", err)
				}
				defer f.Close()
				cl = proxylogger.NewCallJSONL(f)
				cfg.ModelSink = cl.Record
			}
			p, err := proxylogger.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			fmt.Fprintln(g.stdout, "listening on", ln.Addr())
			ctx := cmd.Context()
			if lifetime > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, lifetime)
				defer cancel()
			}
			if err := p.Serve(ctx, ln); err != nil {
				return err
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fmt.Fprintln(g.stdout, "lifetime", lifetime, "over: exiting")
			}
			if jl != nil {
				if err := jl.Err(); err != nil {
					return fmt.Errorf("--egress-log %s: %w", egressLog, err)
				}
			}
			if cl != nil {
				if err := cl.Err(); err != nil {
					return fmt.Errorf("--model-log %s: %w", modelLog, err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "read the model gateway (CA, routes with their credentials) and the upstream proxy from this sandbox.ProxyConfig JSON file, then remove it")
	f.StringVar(&upstreamCA, "upstream-ca", "", "PEM file of certificates trusted beside the system roots when the gateway verifies an upstream")
	f.StringVar(&modelLog, "model-log", "", "append every model call of the gateway to this model_calls.jsonl file")
	f.StringVar(&listen, "listen", "", "address to listen on, e.g. 172.30.0.2:3128 (the sidecar's internal-network address)")
	f.StringSliceVar(&allow, "allow", nil, "allowlist entries, comma-separated or repeated: host, host:port, IP literal, private:host[:port]")
	f.StringVar(&egressLog, "egress-log", "", "append every decision to this egress.jsonl file")
	f.StringVar(&cell, "cell", "", "cell id written into every record")
	f.DurationVar(&lifetime, "lifetime", 0, "exit on its own after this long, e.g. 4h (0: serve until SIGINT or SIGTERM)")
	return cmd
}

// proxyGateway fills cfg's gateway, upstream proxy and upstream roots from
// the --config file (sandbox.ProxyConfig, removed once read: its secrets
// then live in this process only) and the --upstream-ca file.
func proxyGateway(cfg *proxylogger.Config, config, upstreamCA string) error {
	if upstreamCA != "" {
		b, err := os.ReadFile(upstreamCA)
		if err != nil {
			return fmt.Errorf("--upstream-ca: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(b) {
			return usageError{fmt.Errorf("--upstream-ca %s holds no PEM certificate", upstreamCA)}
		}
		cfg.UpstreamRoots = roots
	}
	if config == "" {
		return nil
	}
	b, err := os.ReadFile(config)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	if err := os.Remove(config); err != nil {
		return fmt.Errorf("--config: remove it once read: %w", err)
	}
	var pc sandbox.ProxyConfig
	if err := json.Unmarshal(b, &pc); err != nil {
		return usageError{fmt.Errorf("--config %s: %w", config, err)}
	}
	if len(pc.CACert) > 0 {
		cfg.Gateway = &proxylogger.Gateway{CA: &tlsca.CA{CertPEM: pc.CACert, KeyPEM: pc.CAKey}, Routes: pc.Routes}
	}
	if !pc.Upstream.IsZero() {
		cfg.Upstream = &proxylogger.UpstreamProxy{HTTPProxy: pc.Upstream.HTTPProxy, HTTPSProxy: pc.Upstream.HTTPSProxy, NoProxy: pc.Upstream.NoProxy}
	}
	return nil
}

// proxyLoggerSource is the envelope source of the EgressDecision events
// `serve proxy-logger` publishes.
const proxyLoggerSource = "proxylogger"

// allowLoopbackUpstreams is proxylogger.Config.AllowLoopbackUpstreams for
// `serve proxy-logger`; only tests set it, so they can proxy to loopback
// servers. No flag sets it.
var allowLoopbackUpstreams bool

// busSink publishes each decision as an EgressDecision event of run runID,
// cell cellID (empty: a run-level event), attempt attempt, on b. The
// publish is asynchronous; the first error is kept for err and logged, and
// later decisions are still tried.
type busSink struct {
	ctx           context.Context
	b             *bus.Bus
	runID, cellID string
	attempt       int
	mu            sync.Mutex
	first         error
	logf          func(error)
}

func (s *busSink) record(d proxylogger.Decision) {
	e := events.Must(events.EgressDecision, s.runID, s.cellID, s.attempt, proxyLoggerSource, proxylogger.EventData(d))
	e.At = d.Time.UTC()
	if err := s.b.Publish(s.ctx, e); err != nil {
		s.fail(err)
	}
}

func (s *busSink) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first = err
	}
	s.logf(err)
}

func (s *busSink) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

func newServeProxyLogger(g *globals) *cobra.Command {
	var listen, egressLog, runID, cell string
	var allow []string
	var attempt int
	cmd := &cobra.Command{
		Use:   "proxy-logger --nats URL --run ID --listen ADDR --allow host[:port],... [--cell ID] [--egress-log FILE]",
		Short: "Serve the allowlisting egress proxy of a node, publishing every decision on the bus",
		Long: `Serve the proxy-logger of DESIGN §6 on ADDR until SIGINT or SIGTERM, with the
rules of 'proctor proxy' (--allow entries: host or host:port, bare host =
port 443, "private:" before an entry whose name may resolve to a private
address; loopback and link-local upstreams refused). Every decision is an
EgressDecision event of run --run (and of cell --cell, attempt --attempt,
when given) published on the NATS cluster of --nats, and, with
--egress-log, also one JSON line of that file. It prints "listening on
ADDR" once it accepts connections. A failed publish is logged and the proxy
keeps serving; the command then exits with the first such error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.natsURL == "" {
				return usageError{errors.New("serve proxy-logger needs --nats URL (or PROCTOR_NATS_URL)")}
			}
			if listen == "" || runID == "" {
				return usageError{errors.New("serve proxy-logger needs --listen ADDR and --run ID")}
			}
			if attempt < 1 {
				return usageError{fmt.Errorf("--attempt %d: must be 1 or more", attempt)}
			}
			pol, err := proxylogger.ParsePolicy(allow)
			if err != nil {
				return usageError{fmt.Errorf("--allow: %w", err)}
			}
			ctx := cmd.Context()
			conn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			log := g.logger()
			// Publishing outlives ctx: the decisions recorded while the
			// proxy drains its connections are still sent.
			bs := &busSink{ctx: context.WithoutCancel(ctx), b: conn.Bus, runID: runID, cellID: cell, attempt: attempt,
				logf: func(err error) { log.Error("publish egress decision", "err", err) }}
			if cell == "" {
				bs.attempt = 0
			}
			cfg := proxylogger.Config{Policy: pol, Cell: cell, Logger: log, Sink: bs.record, AllowLoopbackUpstreams: allowLoopbackUpstreams}
			var jl *proxylogger.JSONL
			if egressLog != "" {
				f, err := os.OpenFile(egressLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return fmt.Errorf("--egress-log: %w", err)
				}
				defer f.Close()
				jl = proxylogger.NewJSONL(f)
				cfg.Sink = proxylogger.Tee(jl.Record, bs.record)
			}
			p, err := proxylogger.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			fmt.Fprintln(g.stdout, "listening on", ln.Addr())
			serr := p.Serve(ctx, ln)
			if err := conn.Bus.Flush(context.WithoutCancel(ctx)); err != nil {
				bs.fail(err)
			}
			if serr != nil {
				return serr
			}
			if jl != nil {
				if err := jl.Err(); err != nil {
					return fmt.Errorf("--egress-log %s: %w", egressLog, err)
				}
			}
			if err := bs.err(); err != nil {
				return fmt.Errorf("publish egress decisions: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "address to listen on, e.g. 172.30.0.2:3128 (the node's internal-network address)")
	f.StringSliceVar(&allow, "allow", nil, "allowlist entries, comma-separated or repeated: host, host:port, IP literal, private:host[:port]")
	f.StringVar(&runID, "run", "", "run id of the published EgressDecision events")
	f.StringVar(&cell, "cell", "", "cell id written into every record and event (none: run-level events)")
	f.IntVar(&attempt, "attempt", 1, "attempt of the cell's events")
	f.StringVar(&egressLog, "egress-log", "", "also append every decision to this egress.jsonl file")
	return cmd
}
