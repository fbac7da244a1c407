package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/cellrun"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/services/aggregator"
	"github.com/proctor-eval/proctor/services/launcher"
	"github.com/proctor-eval/proctor/services/planner"
	"github.com/proctor-eval/proctor/services/verifier"
)

var allServices = []string{"planner", "launcher", "verifier", "aggregator"}

type stackConfig struct {
	node        string
	concurrency int
	imageMap    string
	// sandbox names the driver of the cells' sandboxes ("" the default).
	sandbox  string
	services []string
	limits   limitFlags
	// ackWait is the launcher's and verifier's AckWait (0: 60 s).
	ackWait time.Duration
	// nodeLost is the aggregator's Config.NodeLost (0: its default).
	nodeLost time.Duration
	// storeTrees: the services serve a cluster, whose nodes share only
	// NATS: the planner stores the trees it plans and the launcher and
	// verifier each cell's output (PROCTOR_TREES). A single-process run
	// reads and writes its paths in place.
	storeTrees bool
	// treeCacheMB bounds the node's cache of fetched trees in MiB (0: no
	// bound; launcher and verifier TreeCacheBytes).
	treeCacheMB int64
}

type stack struct {
	// driver runs the cells' sandboxes (nil when this process runs no
	// launcher or verifier).
	driver  sandbox.Driver
	planner *planner.Service // nil when this process runs no planner
}

// startStack starts the named services on b in grp. Services that run
// sandboxes share one driver, the one cfg.sandbox selects.
func (g *globals) startStack(ctx context.Context, grp *errgroup.Group, b *bus.Bus, cfg stackConfig) (*stack, error) {
	log := g.logger()
	st := &stack{}
	if cfg.node == "" {
		h, _ := os.Hostname()
		cfg.node = launcher.NodeName(h)
	}
	if slices.Contains(cfg.services, "launcher") || slices.Contains(cfg.services, "verifier") {
		sd, err := g.lookupSandbox(cfg.sandbox)
		if err != nil {
			return nil, err
		}
		var m *sandbox.ImageMap
		if cfg.imageMap != "" {
			if m, err = sandbox.LoadImageMap(cfg.imageMap); err != nil {
				return nil, err
			}
		}
		defaults, err := cfg.limits.limits()
		if err != nil {
			return nil, err
		}
		d, err := sd.open(sandboxConfig{getenv: g.getenv, logger: log, imageMap: m, defaults: defaults})
		if err != nil {
			return nil, err
		}
		if err := sd.ready(ctx, d); err != nil {
			return nil, err
		}
		st.driver = d
	}
	// A launcher and a verifier in one process share the node's slots, so
	// --concurrency bounds the cells holding a container, solve and verify
	// together.
	var slots *launcher.Slots
	if slices.Contains(cfg.services, "launcher") && slices.Contains(cfg.services, "verifier") {
		n := cfg.concurrency
		if n <= 0 {
			n = launcher.DefaultConcurrency()
		}
		slots = launcher.NewSlots(n)
	}
	for _, name := range cfg.services {
		var run func(context.Context) error
		switch name {
		case "planner":
			s, err := planner.New(planner.Config{Logger: log, StoreTrees: cfg.storeTrees, Getenv: g.getenv}, b)
			if err != nil {
				return nil, err
			}
			st.planner = s
			run = s.Run
		case "launcher":
			s, err := launcher.New(launcher.Config{Node: cfg.node, Concurrency: cfg.concurrency, Logger: log, Slots: slots, AckWait: cfg.ackWait, StoreOutputs: cfg.storeTrees, Getenv: g.getenv, TreeCacheBytes: cfg.treeCacheMB << 20}, b, st.driver)
			if err != nil {
				return nil, err
			}
			run = s.Run
		case "verifier":
			vc := verifier.Config{Node: cfg.node, Concurrency: max(cfg.concurrency, 1), Logger: log, AckWait: cfg.ackWait, StoreOutputs: cfg.storeTrees, Getenv: g.getenv, TreeCacheBytes: cfg.treeCacheMB << 20}
			if slots != nil {
				vc.Slots = slots // not a typed nil in the interface
			}
			s, err := verifier.New(vc, b, st.driver)
			if err != nil {
				return nil, err
			}
			run = s.Run
		case "aggregator":
			s, err := aggregator.New(aggregator.Config{Version: version(), Logger: log, NodeLost: cfg.nodeLost}, b)
			if err != nil {
				return nil, err
			}
			run = s.Run
		default:
			return nil, usageError{fmt.Errorf("unknown service %q (planner, launcher, verifier, aggregator, all)", name)}
		}
		grp.Go(func() error { return run(ctx) })
	}
	if cfg.storeTrees && (slices.Contains(cfg.services, "launcher") || slices.Contains(cfg.services, "verifier")) {
		// The cell directories this node's workers left (a worker
		// killed, a run ended during a verify), at start and every
		// --ack-wait.
		every := cfg.ackWait
		if every <= 0 {
			every = time.Minute
		}
		sw := &cellrun.Sweeper{Bus: b, Dir: cellrun.NodeOutputs()}
		grp.Go(func() error { sw.Run(ctx, every, log); return nil })
	}
	return st, nil
}
