package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/internal/view"
)

func newView(g *globals) *cobra.Command {
	var addr, token string
	cmd := &cobra.Command{
		Use:   "view [--addr 127.0.0.1:8080] [--token T]",
		Short: "Serve a read-only web UI over the event log, live",
		Long: `Serve a read-only web UI over the event log: the run index (/runs), each run
(/runs/RUN: progress per harness, pass rates with their 95 % intervals, cost,
the comparison against the baseline, a task × harness grid coloured by
outcome, the report's figures) and each cell (/runs/RUN/cells/CELL: its
events as a timeline, the agent's transcript, its files with their tails,
egress decisions, isolation facts and every metric of its row). The JSON
behind each page is at the same path with ".json". A run that has not
finished updates live over Server-Sent Events. Everything is served from
this binary; nothing is fetched at run time.

The log is reached as 'runs' and 'watch' reach it: --nats, else the
embedded server of a running proctor on this machine, else the store under
$PROCTOR_HOME. The viewer never holds that store against a run: it serves
it only while no proctor runs, hands it over to a 'tasks run' or 'runs
resume' that starts, reads through the run's server while it runs and
takes the store back when it ends; pages answer "pending" while the store
changes hands. The viewer has no authentication: it listens on loopback by
default; with --addr on another interface, give --token (then open the URL
with ?token=T once) or accept that anyone who reaches the port reads the
log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.serveView(cmd.Context(), addr, token)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "listen address (host:port)")
	cmd.Flags().StringVar(&token, "token", "", "require this token (?token=, a cookie, or Authorization: Bearer)")
	return cmd
}

// loopback reports whether a listen address only accepts local
// connections: a loopback IP or "localhost". An empty host (all
// interfaces) is not loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (g *globals) serveView(ctx context.Context, addr, token string) error {
	var src view.Source
	if g.natsURL != "" {
		conn, err := g.connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		src = view.Fixed(view.Log{Bus: conn.Bus})
	} else {
		// The embedded store: never held against a run (viewSource).
		vs := newViewSource(g)
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); vs.run(sctx) }()
		defer func() { stop(); <-done }()
		if _, err := vs.Log(ctx); err != nil {
			return ErrInterrupted
		}
		src = vs
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usageError{fmt.Errorf("--addr %s: %w", addr, err)}
	}
	// Control actions (a run page's pause, continue, cancel) need a token
	// on an address beyond this machine.
	control := token != "" || loopback(ln.Addr().String())
	srv, err := view.New(ctx, view.Config{Version: version(), Token: token, Control: control, Logger: g.logger()}, src)
	if err != nil {
		_ = ln.Close()
		return err
	}
	if !control {
		fmt.Fprintf(g.stderr, "warning: proctor view listens on %s, beyond this machine, with no authentication: anyone who reaches it reads the event log (give --token to require one); a run's control actions are refused without --token\n", ln.Addr())
	}
	url := "http://" + ln.Addr().String() + "/runs"
	if token != "" {
		url += "?token=" + token
	}
	fmt.Fprintf(g.stdout, "proctor view: %s (reading %s)\n", url, g.storeName())
	// Requests (live streams included) end with ctx.
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
