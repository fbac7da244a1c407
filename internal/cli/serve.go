package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/launcher"
)

func newServe(g *globals) *cobra.Command {
	var node, imageMap, sandboxName string
	var concurrency int
	var treeCacheMB int64
	treeCacheDefault, treeCacheEnvErr := envInt64(g.getenv, "PROCTOR_TREE_CACHE_MB", defaultTreeCacheMB)
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
			if treeCacheEnvErr != nil && !cmd.Flags().Changed("tree-cache-mb") {
				return usageError{treeCacheEnvErr}
			}
			if treeCacheMB < 0 {
				return usageError{fmt.Errorf("--tree-cache-mb %d: want a number of MiB, or 0 for no bound", treeCacheMB)}
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
			if _, err := g.startStack(gctx, grp, conn.Bus, stackConfig{node: node, concurrency: concurrency, imageMap: imageMap, sandbox: sandboxName, services: services, limits: limits, ackWait: ackWait, nodeLost: nodeLost, storeTrees: true, treeCacheMB: treeCacheMB}); err != nil {
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
	cmd.Flags().Int64Var(&treeCacheMB, "tree-cache-mb", treeCacheDefault, "bound in MiB of this node's cache of fetched trees ($PROCTOR_HOME/trees): least recently used trees are removed first, never one a running cell uses (0: no bound; env PROCTOR_TREE_CACHE_MB)")
	limits.add(cmd.Flags())
	cmd.AddCommand(newServeFakeModel(g), newServeProxyLogger(g))
	return cmd
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

// defaultTreeCacheMB is the default bound of a worker's tree cache: 10 GiB.
const defaultTreeCacheMB = 10 << 10

// envInt64 is the integer in the environment variable name, else dflt;
// a value that is not an integer is an error naming the variable.
func envInt64(getenv func(string) string, name string, dflt int64) (int64, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return dflt, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return dflt, fmt.Errorf("%s=%q: want an integer", name, v)
	}
	return n, nil
}
