package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/internal/testutil"
	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxfake"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// storedRuns is a cluster's bucket holding the trees and outputs of
// three runs, as a planner and workers store them: A and B share the
// task tree shared, A alone read the agent tree onlyA, B and C share
// the task tree withC, C alone read onlyC; each run stored one output
// per cell.
type storedRuns struct {
	b     *bus.Bus
	url   string
	store jetstream.ObjectStore
	tree  map[string]string // name -> digest
	out   map[string]string // run -> its output object
	// noEngine: the sandbox driver's engine does not answer.
	noEngine bool
}

func newStoredRuns(t *testing.T, ctx context.Context) *storedRuns {
	t.Helper()
	b, e := bustest.Bus(t)
	store, err := trees.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	s := &storedRuns{b: b, url: e.ClientURL(), store: store, tree: map[string]string{}, out: map[string]string{}}
	root := t.TempDir()
	for _, name := range []string{"shared", "onlyA", "withC", "onlyC"} {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "file.txt"), []byte(strings.Repeat(name, 100)), 0o644); err != nil {
			t.Fatal(err)
		}
		if s.tree[name], err = trees.PutWithin(ctx, b, store, dir, root); err != nil {
			t.Fatal(err)
		}
	}
	plans := map[string][]events.CellPlannedData{
		"A": {{Task: "shared", TaskRevision: s.tree["shared"], Trees: []events.InputTree{{Name: "agent dir", Digest: s.tree["onlyA"]}}}},
		"B": {{Task: "shared", TaskRevision: s.tree["shared"]}, {Task: "withC", TaskRevision: s.tree["withC"]}},
		"C": {{Task: "withC", TaskRevision: s.tree["withC"], Trees: []events.InputTree{{Name: "agent dir", Digest: s.tree["onlyC"]}}}},
	}
	for _, run := range []string{"A", "B", "C"} {
		for i, p := range plans[run] {
			cell := fmt.Sprintf("%s/oracle/m/%d", p.Task, i+1)
			if err := b.PublishAll(ctx, events.Must(events.CellPlanned, run, cell, 1, "planner", p)); err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				continue
			}
			dir := filepath.Join(t.TempDir(), "out")
			if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "logs", "stdout.txt"), []byte(strings.Repeat("output of "+run, 1000)), 0o644); err != nil {
				t.Fatal(err)
			}
			o, err := trees.PutOutput(ctx, store, trees.OutputName(run, cell, 1), dir)
			if err != nil {
				t.Fatal(err)
			}
			s.out[run] = o.Name
		}
	}
	now := time.Now()
	for _, run := range []string{"A", "B"} {
		if err := b.PutRun(ctx, bus.RunRecord{ID: run, Status: bus.StatusFinished, StartedAt: now.Format(time.RFC3339Nano), FinishedAt: now.Format(time.RFC3339Nano)}); err != nil {
			t.Fatal(err)
		}
	}
	c := bus.RunRecord{ID: "C", Status: bus.StatusRunning, StartedAt: now.Format(time.RFC3339Nano), Owner: "host pid 1"}
	c.Renew(now, time.Hour)
	if err := b.PutRun(ctx, c); err != nil {
		t.Fatal(err)
	}
	return s
}

// sizes maps each object of the bucket to its size.
func (s *storedRuns) sizes(t *testing.T, ctx context.Context) map[string]uint64 {
	t.Helper()
	objs, err := trees.List(ctx, s.store)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, o := range objs {
		m[o.Name] = o.Size
	}
	return m
}

// gc runs `proctor gc args...` against the cluster, on a fake sandbox
// driver.
func (s *storedRuns) gc(t *testing.T, ctx context.Context, args ...string) (string, string) {
	t.Helper()
	var stdout, stderr testutil.SyncBuffer
	g := testGlobals(t, &stdout, &stderr)
	g.natsURL = s.url
	g.sandboxes = []sandboxDriver{fakeSandbox("fake", &sandboxfake.Driver{})}
	if s.noEngine {
		g.sandboxes[0].ready = func(context.Context, sandbox.Driver) error { return errors.New("no engine answers") }
	}
	cmd := newGC(g)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if !slices.Contains(args, "--grace") {
		// The trees were stored a moment ago: no grace unless asked.
		args = append(args, "--grace", "0s")
	}
	cmd.SetArgs(append([]string{"--sandbox", "fake"}, args...))
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("gc %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// want checks that the bucket holds exactly names, and that gc's report
// names the objects and bytes between before and now.
func (s *storedRuns) want(t *testing.T, ctx context.Context, step, out string, before map[string]uint64, names ...string) {
	t.Helper()
	now := s.sizes(t, ctx)
	if got := slices.Sorted(maps.Keys(now)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("%s: the bucket holds %v, want %v", step, got, slices.Sorted(slices.Values(names)))
	}
	var n int
	var bytes uint64
	for name, size := range before {
		if _, ok := now[name]; !ok {
			n++
			bytes += size
		}
	}
	if w := fmt.Sprintf("removed %d stored %s, %d bytes\n", n, plural(n, "object", "objects"), bytes); !strings.Contains(out, w) {
		t.Errorf("%s: gc said %q, want %q", step, out, w)
	}
}

// TestGCDryRunOfAStoreWithoutObjects: gc --dry-run on the store of
// single-process runs (no bucket) says there is nothing stored to remove
// and what a dry run does not list, rather than printing nothing.
func TestGCDryRunOfAStoreWithoutObjects(t *testing.T) {
	setenv(t, "PROCTOR_HOME", t.TempDir())
	got := mustProctor(t, "gc", "--dry-run")
	if !strings.HasPrefix(got, "would remove 0 stored objects: this store has no stored outputs or trees") ||
		!strings.Contains(got, "does not list containers") {
		t.Errorf("gc --dry-run of a store without stored objects: %q", got)
	}
}

// TestGCRemovesStoredObjects: gc removes from the bucket the outputs of
// the runs it removes and the trees no remaining run's cells read, and
// says how many objects and bytes it freed; a tree a kept run reads
// stays, and a run still in progress keeps everything; --dry-run lists
// what would go, with sizes, and removes nothing; --older-than spares a
// run that ended recently; a tree stored within --grace stays; a
// machine whose engine does not answer still empties the bucket.
func TestGCRemovesStoredObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newStoredRuns(t, ctx)
	all := s.sizes(t, ctx)
	if len(all) != 7 {
		t.Fatalf("the bucket holds %d objects, want 4 trees and 3 outputs", len(all))
	}

	out, _ := s.gc(t, ctx, "--run", "A", "--dry-run")
	listed := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			listed[f[0]] = f[1]
		}
	}
	for _, name := range []string{s.out["A"], s.tree["onlyA"]} {
		if listed[name] != fmt.Sprint(all[name]) {
			t.Errorf("dry run: %q does not list %s with its size %d", out, name, all[name])
		}
	}
	if w := fmt.Sprintf("would remove 2 stored objects, %d bytes", all[s.out["A"]]+all[s.tree["onlyA"]]); !strings.Contains(out, w) {
		t.Errorf("dry run said %q, want %q", out, w)
	}
	if now := s.sizes(t, ctx); !maps.Equal(now, all) {
		t.Errorf("the dry run removed objects: %v", now)
	}

	// gc of A: its output and the tree only it read; shared stays (B).
	out, _ = s.gc(t, ctx, "--run", "A")
	s.want(t, ctx, "gc --run A", out, all, s.tree["shared"], s.tree["withC"], s.tree["onlyC"], s.out["B"], s.out["C"])
	// Nothing of a removed object is left in the bucket's stream, its
	// delete marker included.
	st, err := s.b.JS.Stream(ctx, "OBJ_"+trees.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("$O."+trees.Bucket+".M.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(info.State.Subjects); n != 5 {
		t.Errorf("the stream holds %d meta subjects, want the 5 objects left: %v", n, info.State.Subjects)
	}

	// gc of every ended run (A, B), C in progress: B's output and the
	// tree of A and B go; C's output and trees stay, withC with them.
	before := s.sizes(t, ctx)
	out, _ = s.gc(t, ctx)
	s.want(t, ctx, "gc", out, before, s.tree["withC"], s.tree["onlyC"], s.out["C"])

	// C ends: --older-than 1h spares it.
	if err := s.b.UpdateRun(ctx, "C", func(r *bus.RunRecord) {
		r.Status, r.FinishedAt = bus.StatusFinished, time.Now().Format(time.RFC3339Nano)
	}); err != nil {
		t.Fatal(err)
	}
	before = s.sizes(t, ctx)
	out, _ = s.gc(t, ctx, "--older-than", "1h")
	s.want(t, ctx, "gc --older-than 1h", out, before, s.tree["withC"], s.tree["onlyC"], s.out["C"])

	// Within the grace every tree stays, named by a run or not (a run
	// being planned may not name them yet); C's output goes.
	d := bus.RunRecord{ID: "D", Status: bus.StatusRequested, Owner: "host pid 2"}
	d.Renew(time.Now(), time.Hour)
	if err := s.b.PutRun(ctx, d); err != nil {
		t.Fatal(err)
	}
	// The chunks an upload killed midway left (no object names them):
	// younger than the grace, they may be an upload in progress.
	for range 2 {
		if _, err := s.b.JS.Publish(ctx, "$O."+trees.Bucket+".C.killedupload", []byte(strings.Repeat("x", 1000))); err != nil {
			t.Fatal(err)
		}
	}
	out, _ = s.gc(t, ctx, "--grace", "1h")
	s.want(t, ctx, "gc within the grace", out, before, s.tree["withC"], s.tree["onlyC"])
	if strings.Contains(out, "unfinished") {
		t.Errorf("gc within the grace removed an upload's chunks: %q", out)
	}

	// D planned nothing and ended: everything goes, from a machine
	// without an engine.
	s.noEngine = true
	if err := s.b.UpdateRun(ctx, "D", func(r *bus.RunRecord) {
		r.Status, r.FinishedAt = bus.StatusFailed, time.Now().Format(time.RFC3339Nano)
	}); err != nil {
		t.Fatal(err)
	}
	before = s.sizes(t, ctx)
	out, errOut := s.gc(t, ctx)
	s.want(t, ctx, "gc of everything", out, before)
	if !strings.Contains(out, "removed the 2 chunks of 1 unfinished upload\n") {
		t.Errorf("gc of everything said %q, want the killed upload's chunks removed", out)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Errorf("the bucket's stream after gc of everything: %+v, %v", info.State, err)
	}
	if !strings.Contains(errOut, "no engine answers; containers and networks left as they are") || strings.Contains(out, "containers") {
		t.Errorf("gc without an engine said %q, %q", out, errOut)
	}
	if _, err := s.store.GetInfo(ctx, s.out["C"]); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("C's output after gc: %v", err)
	}
}

// TestGCRetriesATransientListing: gc lists the bucket again when the bus
// fails transiently (no responders, as while a cluster elects the
// bucket's stream leader after losing a node) and then removes what it
// should.
func TestGCRetriesATransientListing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newStoredRuns(t, ctx)
	all := s.sizes(t, ctx)
	fails := 2
	scanStore = func(ctx context.Context, b *bus.Bus) (trees.Contents, error) {
		if fails > 0 {
			fails--
			return trees.Contents{}, fmt.Errorf("trees: scan %s: %w", trees.Bucket, nats.ErrNoResponders)
		}
		return trees.Scan(ctx, b)
	}
	t.Cleanup(func() { scanStore = trees.Scan })
	out, errOut := s.gc(t, ctx, "--run", "A")
	s.want(t, ctx, "gc --run A after two failed listings", out, all, s.tree["shared"], s.tree["withC"], s.tree["onlyC"], s.out["B"], s.out["C"])
	if fails != 0 || !strings.Contains(errOut, "list the stored objects") {
		t.Errorf("gc did not retry the listing (%d failures left); stderr %q", fails, errOut)
	}
}
