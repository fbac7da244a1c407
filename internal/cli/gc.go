package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/textsafe"
	"github.com/proctor-eval/proctor/pkg/trees"
)

func newGC(g *globals) *cobra.Command {
	var runID, sandboxName string
	var olderThan, grace time.Duration
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc [--run ID | --older-than D] [--dry-run]",
		Short: "Remove what this store's dead runs left: containers, networks, host staging directories, stored outputs and trees",
		Long: `Remove what the runs of this store (the embedded one, or the cluster of
--nats) left behind. Containers, networks and host staging directories go
for every run that ended or is stale (its process died, or on a cluster its
lease ended). From the cluster's PROCTOR_TREES bucket go the stored cell
outputs of every run that ended, and every stored tree (task revision,
agent or skill directory) that no remaining run's planned cells read; a
run that has not ended keeps its outputs and trees (runs resume continues
it), and a run this store does not know is left alone. A tree a planner
stored or found in the last --grace (1h) stays whatever the log says, as
does one a planner finds while gc removes it: the run being planned may
not name it in the log yet. The chunks of uploads killed midway (a worker
killed while it stored an output) go once they are older than --grace.

--run ID removes everything of that one run, alive or not: its sandboxes,
its staging directories, its stored outputs and the trees no other run's
cells read. --older-than D removes only what runs that ended at least D
ago left (a stale run counts from the end of its lease): the age bound of
the bucket, for a periodic gc. --dry-run removes nothing and lists the
stored objects gc would remove, with their sizes (it cannot list
containers). The report says how many objects and bytes were freed. When
the driver's engine does not answer (a cluster's control node), gc says
so and removes the rest.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runID != "" && olderThan != 0 {
				return usageError{errors.New("--run removes one run whatever its age: give --run or --older-than, not both")}
			}
			if grace < 0 {
				return usageError{fmt.Errorf("--grace %v: a duration of 0 or more", grace)}
			}
			if olderThan < 0 {
				return usageError{fmt.Errorf("--older-than %v: a duration of 0 or more", olderThan)}
			}
			ctx := cmd.Context()
			var d sandbox.Collector
			if !dryRun {
				sd, err := g.lookupSandbox(sandboxName)
				if err != nil {
					return err
				}
				driver, err := sd.open(sandboxConfig{getenv: g.getenv, logger: g.logger()})
				if err != nil {
					return err
				}
				var ok bool
				if d, ok = driver.(sandbox.Collector); !ok {
					return usageError{fmt.Errorf("--sandbox %s: the driver cannot collect what runs left (it lacks %s)", sd.name, sandbox.AbilityCollector)}
				}
				// A control node of a cluster has no engine: gc goes on
				// with what it can remove there.
				if err := sd.ready(ctx, driver); err != nil {
					fmt.Fprintf(g.stderr, "proctor: --sandbox %s: %v; containers and networks left as they are\n", sd.name, err)
					d = nil
				}
			}
			report := func(nc, nn int, err error) error {
				if d == nil {
					return nil
				}
				if err == nil {
					fmt.Fprintf(g.stdout, "removed %d %s and %d %s\n", nc, plural(nc, "container", "containers"), nn, plural(nn, "network", "networks"))
				}
				return err
			}
			if runID != "" {
				if !dryRun {
					if err := report(collect(d, func(d sandbox.Collector) (int, int, error) { return d.GC(ctx, runID) })); err != nil {
						return err
					}
					if err := g.gcStaging(func(id string) bool { return id == runID }); err != nil {
						return err
					}
				}
				conn, err := g.connect(ctx)
				if err != nil {
					return err
				}
				defer conn.Close()
				return g.gcStore(ctx, conn, storeGC{removed: func(id string) bool { return id == runID }, grace: grace, dryRun: dryRun})
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
			old := func(r bus.RunRecord) bool { return olderThan == 0 || runAge(r, now) >= olderThan }
			keep := func(id string) bool {
				r, err := conn.GetRun(ctx, id)
				if err != nil {
					return true
				}
				alive := !r.Terminal() && conn.embedded == nil && !r.LeaseExpired(now)
				return alive || !old(r)
			}
			if !dryRun {
				if err := report(collect(d, func(d sandbox.Collector) (int, int, error) { return d.GCDead(ctx, keep) })); err != nil {
					return err
				}
				if err := g.gcStaging(func(id string) bool { return !keep(id) }); err != nil {
					return err
				}
			}
			// Stored objects go only with a run that ended: a stale one
			// keeps the outputs of its finished cells and the trees of
			// the others for `runs resume`.
			ended := memo(func(id string) bool {
				r, err := conn.GetRun(ctx, id)
				return err == nil && r.Terminal() && old(r)
			})
			return g.gcStore(ctx, conn, storeGC{removed: ended, orphans: true, grace: grace, dryRun: dryRun})
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "remove everything of this run, alive or not")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "remove only what runs that ended at least this long ago left (e.g. 168h)")
	cmd.Flags().DurationVar(&grace, "grace", trees.DefaultGrace, "keep a stored tree a planner stored or found, and the chunks of an upload, this recently (a run being planned may not name its trees in the log yet)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "remove nothing: list the stored objects gc would remove, with their sizes")
	cmd.Flags().StringVar(&sandboxName, "sandbox", defaultSandbox, "the driver whose sandboxes to remove: "+strings.Join(sandboxNames(), ", "))
	return cmd
}

// collect calls f on d, unless d is nil (its engine does not answer).
func collect(d sandbox.Collector, f func(sandbox.Collector) (int, int, error)) (int, int, error) {
	if d == nil {
		return 0, 0, nil
	}
	return f(d)
}

// runAge is how long ago r ended: its finish time, else (a stale run)
// the end of its lease, else its start; 0 when it records none of them.
func runAge(r bus.RunRecord, now time.Time) time.Duration {
	for _, s := range []string{r.FinishedAt, r.LeaseUntil, r.StartedAt} {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil && s != "" {
			return now.Sub(t)
		}
	}
	return 0
}

// memo is f remembering its answer for each run id (a run's objects are
// many; its record is read once).
func memo(f func(string) bool) func(string) bool {
	seen := map[string]bool{}
	return func(id string) bool {
		v, ok := seen[id]
		if !ok {
			v = f(id)
			seen[id] = v
		}
		return v
	}
}

// gcStaging removes the host staging directories (harness.StageDir: a
// cell's provider env file, staged before it is copied into the sandbox)
// of the dead runs, which a proctor killed with SIGKILL leaves behind.
func (g *globals) gcStaging(dead func(runID string) bool) error {
	n, err := harness.GCStaging(dead)
	if n > 0 {
		fmt.Fprintf(g.stdout, "removed %d host staging %s\n", n, plural(n, "directory", "directories"))
	}
	return err
}

// storeGC is what gcStore removes.
type storeGC struct {
	// removed reports whether gc removes the run: its stored outputs go,
	// and its cells no longer keep a tree.
	removed func(runID string) bool
	// orphans: a tree that no planned cell of any run reads goes too, and
	// so do the chunks of uploads killed midway and the markers of
	// removals stopped midway.
	orphans bool
	// grace: a tree a planner stored or found, and an upload's chunks,
	// this recently stay (trees.PlanSweep).
	grace  time.Duration
	dryRun bool
}

// gcStore removes from the PROCTOR_TREES bucket (trees.PlanSweep) the
// outputs of the runs o.removed names and the trees no other run's
// planned cells read, or with o.dryRun lists them with their sizes; it
// prints how many objects and bytes it freed. A store without the bucket
// (single-process runs store nothing) has nothing to remove.
//
// A tree a planner stored or found within o.grace stays, and one it
// finds while gc removes it stays too (trees.Remove fails with
// trees.ErrInUse): its cells may not be in the log yet.
func (g *globals) gcStore(ctx context.Context, conn *connection, o storeGC) error {
	if _, err := trees.Lookup(ctx, conn.Bus); errors.Is(err, jetstream.ErrObjectNotFound) {
		if o.dryRun {
			// Silence would read as "nothing checked".
			fmt.Fprintln(g.stdout, "would remove 0 stored objects: this store has no stored outputs or trees (a run of one process stores none; --dry-run does not list containers, networks or staging directories)")
		}
		return nil
	} else if err != nil {
		return err
	}
	// The bucket is listed before the log is read (trees.PlanSweep).
	// Both are read again while the bus fails transiently (a NATS node
	// lost, a stream leader moving), for up to outputRetry.
	var contents trees.Contents
	var refs map[string]map[string]bool
	rctx, cancel := context.WithTimeout(ctx, outputRetry)
	defer cancel()
	err := bus.Retry(rctx, g.logger(), "list the stored objects", func(context.Context) error {
		var err error
		if contents, err = scanStore(ctx, conn.Bus); err != nil {
			return err
		}
		refs, err = trees.References(ctx, conn.Bus)
		return err
	})
	if err != nil {
		return err
	}
	cutoff := time.Now().Add(-o.grace)
	sweep := trees.PlanSweep(contents.Objects, refs, o.removed, o.orphans, cutoff)
	var uploads []trees.Upload
	var markers []trees.Stored
	if o.orphans {
		markers = contents.Markers
		for _, u := range contents.Uploads {
			if u.Last.Before(cutoff) {
				uploads = append(uploads, u)
			}
		}
	}
	var chunks uint64
	for _, u := range uploads {
		chunks += u.Chunks
	}
	if o.dryRun {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OBJECT\tBYTES\tOF")
		for _, s := range sweep.Objects {
			of := "tree"
			if s.Run != "" {
				of = "output of run " + s.Run
			}
			fmt.Fprintln(tw, textsafe.Line(fmt.Sprintf("%s\t%d\t%s", s.Name, s.Size, of)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "would remove %d stored %s, %d bytes\n", len(sweep.Objects), plural(len(sweep.Objects), "object", "objects"), sweep.Bytes)
		if len(uploads) > 0 {
			fmt.Fprintf(g.stdout, "would remove the %d chunks of %d unfinished %s\n", chunks, len(uploads), plural(len(uploads), "upload", "uploads"))
		}
		return nil
	}
	rm, err := trees.NewRemover(ctx, conn.Bus)
	if err != nil {
		return err
	}
	// Removals go removeConcurrency at a time: each is a few requests
	// to the server, which answers many at once.
	var (
		mu                sync.Mutex
		n, kept, gone     int
		freed, goneChunks uint64
		errs              []error
		wg                sync.WaitGroup
	)
	sem := make(chan struct{}, removeConcurrency)
	do := func(f func() error, ok func()) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := f()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, trees.ErrInUse):
				kept++
			case err != nil:
				errs = append(errs, err)
			default:
				ok()
			}
		}()
	}
	for _, s := range sweep.Objects {
		do(func() error { return rm.Remove(ctx, s) }, func() { n++; freed += s.Size })
	}
	for _, m := range markers {
		do(func() error { return rm.Remove(ctx, m) }, func() {})
	}
	for _, u := range uploads {
		do(func() error { return rm.RemoveUpload(ctx, u) }, func() { gone++; goneChunks += u.Chunks })
	}
	wg.Wait()
	fmt.Fprintf(g.stdout, "removed %d stored %s, %d bytes\n", n, plural(n, "object", "objects"), freed)
	if gone > 0 {
		fmt.Fprintf(g.stdout, "removed the %d chunks of %d unfinished %s\n", goneChunks, gone, plural(gone, "upload", "uploads"))
	}
	if kept > 0 {
		fmt.Fprintf(g.stderr, "proctor: kept %d %s a planner used during gc\n", kept, plural(kept, "tree", "trees"))
	}
	return errors.Join(errs...)
}

// scanStore lists the bucket (trees.Scan; a test makes it fail as a
// cluster losing a node does).
var scanStore = trees.Scan

// removeConcurrency is how many removals gc has in flight.
const removeConcurrency = 16
