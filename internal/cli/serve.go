package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/launcher"
)

func newServe(g *globals) *cobra.Command {
	var node, imageMap, sandboxName string
	var concurrency int
	var ackWait, nodeLost time.Duration
	var limits limitFlags
	cmd := &cobra.Command{
		Use:   "serve (planner|launcher|verifier|aggregator|all)... --nats URL",
		Short: "Run proctor services as a long-lived process against a NATS cluster",
		Long: `Run one or more services against the NATS cluster given by --nats. The same
services run in-process under 'proctor tasks run'; here they serve every run
published to the cluster until SIGINT or SIGTERM. A launcher and the verifier
of the same machine must use the same --node.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.natsURL == "" {
				return usageError{errors.New("serve needs --nats URL (or PROCTOR_NATS_URL)")}
			}
			services := args
			if len(args) == 1 && args[0] == "all" {
				services = allServices
			}
			ctx := cmd.Context()
			conn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			grp, gctx := errgroup.WithContext(ctx)
			if _, err := g.startStack(gctx, grp, conn.Bus, stackConfig{node: node, concurrency: concurrency, imageMap: imageMap, sandbox: sandboxName, services: services, limits: limits, ackWait: ackWait, nodeLost: nodeLost, storeTrees: true}); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "serving %s on %s\n", strings.Join(services, ", "), g.natsURL)
			err = grp.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "this machine's node name (default: host name)")
	cmd.Flags().IntVar(&concurrency, "concurrency", launcher.DefaultConcurrency(), "cells run at once by the launcher")
	cmd.Flags().StringVar(&imageMap, "image-map", "", "image reference map file")
	cmd.Flags().StringVar(&sandboxName, "sandbox", defaultSandbox, sandboxHelp())
	cmd.Flags().DurationVar(&ackWait, "ack-wait", time.Minute, "how long a launch or verify job may go without a heartbeat before it is redelivered (a dead worker's job); the launcher also reaps leftover sandboxes this often")
	cmd.Flags().DurationVar(&nodeLost, "node-lost", aggregator.DefaultNodeLost, "the aggregator errors (class infra, so --retries runs it elsewhere) a cell whose verify job waits on a node whose verifier wrote no heartbeat for this long")
	limits.add(cmd.Flags())
	cmd.AddCommand(newServeFakeModel(g), newServeProxyLogger(g))
	return cmd
}

func newGC(g *globals) *cobra.Command {
	var runID, sandboxName string
	cmd := &cobra.Command{
		Use:   "gc [--run ID]",
		Short: "Remove containers, networks and host staging directories left by this store's dead runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sd, err := g.lookupSandbox(sandboxName)
			if err != nil {
				return err
			}
			driver, err := sd.open(sandboxConfig{getenv: g.getenv, logger: g.logger()})
			if err != nil {
				return err
			}
			d, ok := driver.(sandbox.Collector)
			if !ok {
				return usageError{fmt.Errorf("--sandbox %s: the driver cannot collect what runs left (it lacks %s)", sd.name, sandbox.AbilityCollector)}
			}
			report := func(nc, nn int, err error) error {
				if err == nil {
					fmt.Fprintf(g.stdout, "removed %d containers and %d networks\n", nc, nn)
				}
				return err
			}
			if runID != "" {
				if err := report(d.GC(ctx, runID)); err != nil {
					return err
				}
				return g.gcStaging(func(id string) bool { return id == runID })
			}
			conn, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			// A run of this store is dead once it has ended or is stale
			// (the rule `runs list` marks with *): on the embedded store
			// this process holds, no other process drives a run; on a
			// cluster, its owner stopped renewing the lease of a dead one.
			// A run this store does not know (another PROCTOR_HOME or
			// cluster on the same engine), or cannot be asked about, is
			// left alone: `gc --run` removes it by name.
			now := time.Now()
			keep := func(id string) bool {
				r, err := conn.GetRun(ctx, id)
				if err != nil {
					return true
				}
				return !r.Terminal() && conn.embedded == nil && !r.LeaseExpired(now)
			}
			if err := report(d.GCDead(ctx, keep)); err != nil {
				return err
			}
			return g.gcStaging(func(id string) bool { return !keep(id) })
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "remove everything of this run, alive or not")
	cmd.Flags().StringVar(&sandboxName, "sandbox", defaultSandbox, "the driver whose sandboxes to remove: "+strings.Join(sandboxNames(), ", "))
	return cmd
}

// gcStaging removes the host staging directories (harness.StageDir: a
// cell's provider env file, staged before it is copied into the sandbox)
// of the dead runs, which a proctor killed with SIGKILL leaves behind.
func (g *globals) gcStaging(dead func(runID string) bool) error {
	n, err := harness.GCStaging(dead)
	if n > 0 {
		fmt.Fprintf(g.stdout, "removed %d host staging directories\n", n)
	}
	return err
}

func newTasksHarnesses(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "harnesses",
		Short: "List the harnesses proctor knows",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg := harness.Registry()
			width := 0
			for _, h := range reg {
				width = max(width, len(h.Syntax))
			}
			for _, h := range reg {
				state := ""
				if !h.Available {
					state = " (not available in this version)"
				}
				fmt.Fprintf(g.stdout, "%-*s %s; scored by %s%s\n", width, h.Syntax, h.Description, h.ScoredBy, state)
			}
			return nil
		},
	}
}
