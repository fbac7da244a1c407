package trees

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/events"
)

// DefaultGrace is how long a collection keeps a tree after a planner
// last stored or found it (Touch), and the chunks of an upload after its
// last chunk: longer than any planning of a run, so a planner's cells are
// in the log before its trees can go.
const DefaultGrace = time.Hour

// ErrInUse is the error of a removal that found the object changed since
// it was listed (a planner found or stored it again): it is kept.
var ErrInUse = errors.New("trees: the object changed since it was listed")

// The subjects of the bucket's stream, as the object store lays them out
// (ADR-20): one meta message per name, the chunks of each upload under a
// subject of their own (a unique id, the object's NUID).
const (
	streamName = "OBJ_" + Bucket
	metaAll    = "$O." + Bucket + ".M.>"
	chunksPre  = "$O." + Bucket + ".C."
)

func metaSubject(name string) string {
	return "$O." + Bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// Stored is one object of the bucket.
type Stored struct {
	Name string `json:"name"`
	// Size is the object's size in bytes as stored (a compressed tar).
	Size uint64 `json:"size"`
	// Run is the run of a cell output (OutputName); "" for a tree.
	Run string `json:"run,omitempty"`
	// Seq is the stream sequence of the object's meta message when it
	// was listed (Scan): Remove removes the object only if it is still
	// the last (0: whatever it is then).
	Seq uint64 `json:"-"`
	// Touched is when that meta message was stored, on the server's
	// clock: when the object was stored, or a planner last found it
	// (Touch).
	Touched time.Time `json:"-"`

	nuid string
}

// Upload is a set of chunks that no object names: an upload killed
// midway (its object is published only after its last chunk), or one in
// progress.
type Upload struct {
	// NUID is the upload's id, the last token of its chunks' subject.
	NUID string
	// Chunks is how many chunks it left.
	Chunks uint64
	// Last is when its last chunk was stored (server clock).
	Last time.Time

	seq uint64
}

// Contents is what Scan found in the bucket.
type Contents struct {
	// Objects are the bucket's objects, sorted by name.
	Objects []Stored
	// Markers are delete markers a removal stopped midway left.
	Markers []Stored
	// Uploads are the chunk sets no object names, sorted by NUID.
	Uploads []Upload
}

// List returns the bucket's objects sorted by name, deleted ones left
// out.
func List(ctx context.Context, store jetstream.ObjectStore) ([]Stored, error) {
	infos, err := store.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("trees: list %s: %w", Bucket, err)
	}
	out := make([]Stored, 0, len(infos))
	for _, in := range infos {
		run, _ := OutputRun(in.Name)
		out = append(out, Stored{Name: in.Name, Size: in.Size, Run: run})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Scan lists the bucket as a collection needs it: every object with the
// sequence and time of its meta message, the delete markers left, and
// the chunk sets no live object names. The meta messages are read before
// the chunks, so an upload that completes in between shows as a set of
// chunks written just now.
func Scan(ctx context.Context, b *bus.Bus) (Contents, error) {
	var c Contents
	st, err := b.JS.Stream(ctx, streamName)
	if err != nil {
		return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{metaAll},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
	}
	live := map[string]bool{}
	for pending := ci.NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 1024)), jetstream.FetchContext(ctx))
		if err != nil {
			return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
			}
			pending = md.NumPending
			var info jetstream.ObjectInfo
			if json.Unmarshal(m.Data(), &info) != nil {
				continue
			}
			run, _ := OutputRun(info.Name)
			s := Stored{Name: info.Name, Size: info.Size, Run: run, Seq: md.Sequence.Stream, Touched: md.Timestamp, nuid: info.NUID}
			if info.Deleted {
				c.Markers = append(c.Markers, s)
				continue
			}
			live[info.NUID] = true
			c.Objects = append(c.Objects, s)
		}
		if err := batch.Error(); err != nil {
			return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
		}
		if got == 0 {
			return c, fmt.Errorf("trees: scan %s: no meta message came (%d pending)", Bucket, pending)
		}
	}
	sort.Slice(c.Objects, func(i, j int) bool { return c.Objects[i].Name < c.Objects[j].Name })
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(chunksPre+">"))
	if err != nil {
		return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
	}
	for subj, n := range info.State.Subjects {
		nuid := strings.TrimPrefix(subj, chunksPre)
		if live[nuid] {
			continue
		}
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return c, fmt.Errorf("trees: scan %s: %w", Bucket, err)
		}
		c.Uploads = append(c.Uploads, Upload{NUID: nuid, Chunks: n, Last: m.Time, seq: m.Sequence})
	}
	sort.Slice(c.Uploads, func(i, j int) bool { return c.Uploads[i].NUID < c.Uploads[j].NUID })
	return c, nil
}

// OutputRun returns the run of a cell output's object name
// (cell/<run>/<cell hash>/<attempt>); ok is false for any other name (a
// tree's digest).
func OutputRun(name string) (run string, ok bool) {
	rest, ok := strings.CutPrefix(name, "cell/")
	if !ok {
		return "", false
	}
	run, _, ok = strings.Cut(rest, "/")
	return run, ok && run != ""
}

// References returns, for every run with a CellPlanned event in the log,
// the objects its cells read: each task's revision and the digest of
// each of its InputTrees (a single-process run's cells name their task
// revision too; a bucket never holds it).
func References(ctx context.Context, b *bus.Bus) (map[string]map[string]bool, error) {
	refs := map[string]map[string]bool{}
	err := b.Read(ctx, []string{events.TypeFilter(events.CellPlanned)}, func(e events.Envelope) error {
		var p events.CellPlannedData
		if events.Into(e, &p) != nil {
			return nil
		}
		m := refs[e.RunID]
		if m == nil {
			m = map[string]bool{}
			refs[e.RunID] = m
		}
		if p.TaskRevision != "" {
			m[p.TaskRevision] = true
		}
		for _, t := range p.Trees {
			if t.Digest != "" {
				m[t.Digest] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("trees: reading the planned cells: %w", err)
	}
	return refs, nil
}

// Sweep is what a collection of the bucket removes.
type Sweep struct {
	// Objects are the objects it removes, sorted by name.
	Objects []Stored
	// Bytes is their total size.
	Bytes uint64
}

// PlanSweep decides which of objs (Scan, listed before refs were read) a
// collection removes: the output of every run removed reports true for,
// and every tree that no other run's cells read (refs: References) and
// that no planner stored or found (Touched) since keepSince, among the
// trees a removed run read, or among all trees when orphans is set (then
// a tree no planned cell names goes too). A run absent from refs keeps
// nothing.
//
// Why a tree touched since keepSince stays: a planner touches each tree
// of a run before it publishes the run's CellPlanned events, and does so
// within the grace (keepSince is now less DefaultGrace); a tree last
// touched before keepSince was therefore named in the log, if at all,
// before refs were read. A touch after objs were listed changes the
// object's meta message, and Remove then keeps it (ErrInUse).
func PlanSweep(objs []Stored, refs map[string]map[string]bool, removed func(run string) bool, orphans bool, keepSince time.Time) Sweep {
	kept, freed := map[string]bool{}, map[string]bool{}
	for run, m := range refs {
		dst := kept
		if removed(run) {
			dst = freed
		}
		for d := range m {
			dst[d] = true
		}
	}
	var s Sweep
	for _, o := range objs {
		var gone bool
		if o.Run != "" {
			gone = removed(o.Run)
		} else {
			gone = !kept[o.Name] && (orphans || freed[o.Name]) && o.Touched.Before(keepSince)
		}
		if gone {
			s.Objects = append(s.Objects, o)
			s.Bytes += o.Size
		}
	}
	return s
}

// Remover removes objects and chunks from the bucket (Remove,
// RemoveUpload), with one handle on its stream for many removals.
type Remover struct {
	st jetstream.Stream
}

// NewRemover returns a Remover of the bucket of b.
func NewRemover(ctx context.Context, b *bus.Bus) (*Remover, error) {
	st, err := b.JS.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("trees: %s: %w", Bucket, err)
	}
	return &Remover{st: st}, nil
}

// Remove is Remover.Remove on a Remover of its own.
func Remove(ctx context.Context, b *bus.Bus, o Stored) error {
	r, err := NewRemover(ctx, b)
	if err != nil {
		return err
	}
	return r.Remove(ctx, o)
}

// Remove deletes the object o, provided its meta message is still the
// one Scan listed (o.Seq; 0: whatever it is now), else it returns
// ErrInUse and removes nothing. The meta message is deleted by its
// sequence, which is a compare-and-set: a Touch or a Put since the
// listing replaced that message (each rolls up the name's earlier ones),
// so the delete finds nothing, and a Touch that comes after the delete
// finds no object and stores it again (Touch). Then the object's chunks
// are purged: a removed object leaves nothing in the bucket's stream. A
// removal killed in between leaves chunks that no object names, which
// Scan reports (Uploads) for a later collection. o may be a delete
// marker (Contents.Markers): it goes the same way.
func (r *Remover) Remove(ctx context.Context, o Stored) error {
	if o.Seq == 0 {
		m, err := r.st.GetLastMsgForSubject(ctx, metaSubject(o.Name))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("trees: delete %s: %w", o.Name, err)
		}
		var info jetstream.ObjectInfo
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return fmt.Errorf("trees: delete %s: its meta: %w", o.Name, err)
		}
		o.Seq, o.nuid = m.Sequence, info.NUID
	}
	if err := r.st.DeleteMsg(ctx, o.Seq); err != nil {
		if _, gerr := r.st.GetMsg(ctx, o.Seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("%w: %s", ErrInUse, o.Name)
		}
		return fmt.Errorf("trees: delete %s: %w", o.Name, err)
	}
	if o.nuid != "" {
		if err := r.st.Purge(ctx, jetstream.WithPurgeSubject(chunksPre+o.nuid)); err != nil {
			return fmt.Errorf("trees: delete %s: purge its chunks: %w", o.Name, err)
		}
	}
	return nil
}

// RemoveUpload purges the chunks of u, up to the last one Scan saw (a
// chunk written since stays).
func (r *Remover) RemoveUpload(ctx context.Context, u Upload) error {
	if err := r.st.Purge(ctx, jetstream.WithPurgeSubject(chunksPre+u.NUID), jetstream.WithPurgeSequence(u.seq+1)); err != nil {
		return fmt.Errorf("trees: purge upload %s: %w", u.NUID, err)
	}
	return nil
}

// Touch marks the object name as just used: its meta message is
// published again, unchanged, on the condition that it is still the last
// one (a compare-and-set that a concurrent Remove's marker fails, or
// that fails Remove's). It reports false when the bucket holds no object
// of the name (never stored, or removed: store it again).
func Touch(ctx context.Context, b *bus.Bus, name string) (bool, error) {
	st, err := b.JS.Stream(ctx, streamName)
	if err != nil {
		return false, fmt.Errorf("trees: touch %s: %w", name, err)
	}
	subj := metaSubject(name)
	for range 8 {
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("trees: touch %s: %w", name, err)
		}
		var info jetstream.ObjectInfo
		if json.Unmarshal(m.Data, &info) != nil || info.Deleted {
			return false, nil
		}
		if _, err := publishMeta(ctx, b, subj, m.Data, m.Sequence); err == nil {
			return true, nil
		} else if !isWrongLast(err) {
			return false, fmt.Errorf("trees: touch %s: %w", name, err)
		}
		// Another touch or a removal came first: read it again.
	}
	return false, fmt.Errorf("trees: touch %s: its meta changed on every try", name)
}

// publishMeta publishes data as the meta message subj, replacing the
// subject's earlier messages (a rollup, as the object store does), if
// the subject's last message is still seq; it returns the new message's
// sequence.
func publishMeta(ctx context.Context, b *bus.Bus, subj string, data []byte, seq uint64) (uint64, error) {
	msg := nats.NewMsg(subj)
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	msg.Data = data
	ack, err := b.JS.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(seq))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// isWrongLast reports whether err is a failed compare-and-set of a
// subject's last sequence.
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
