package cli

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

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
)

func newProxy(g *globals) *cobra.Command {
	var listen, egressLog, cell string
	var allow []string
	cmd := &cobra.Command{
		Use:   "proxy --listen ADDR --allow host[:port],... [--egress-log FILE]",
		Short: "Run the allowlisting egress proxy (the proxy-logger) in the foreground",
		Long: `Serve the proxy-logger of DESIGN §6 on ADDR until SIGINT or SIGTERM: CONNECT
host:port and plain-HTTP requests only to the --allow entries (host or
host:port, bare host = port 443, "private:" before an entry whose name may
resolve to a private address), every decision appended to --egress-log as
one JSON line. Upstreams that resolve to loopback or link-local addresses
are refused. It prints "listening on ADDR" once it accepts connections.`,
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
			p, err := proxylogger.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			fmt.Fprintln(g.stdout, "listening on", ln.Addr())
			if err := p.Serve(cmd.Context(), ln); err != nil {
				return err
			}
			if jl != nil {
				if err := jl.Err(); err != nil {
					return fmt.Errorf("--egress-log %s: %w", egressLog, err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "address to listen on, e.g. 172.30.0.2:3128 (the sidecar's internal-network address)")
	f.StringSliceVar(&allow, "allow", nil, "allowlist entries, comma-separated or repeated: host, host:port, IP literal, private:host[:port]")
	f.StringVar(&egressLog, "egress-log", "", "append every decision to this egress.jsonl file")
	f.StringVar(&cell, "cell", "", "cell id written into every record")
	return cmd
}
