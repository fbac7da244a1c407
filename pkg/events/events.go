// Package events is the vocabulary every proctor service speaks: the event
// envelope of DESIGN §7, one Go type per event's data, the subjects events
// are published on, and encoding. It is the only package services share.
package events

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
)

// Version is the envelope version written in Envelope.V.
const Version = 1

// Type names an event type.
type Type string

// Event types (DESIGN §7).
const (
	RunRequested   Type = "RunRequested"
	RunPlanned     Type = "RunPlanned"
	CellPlanned    Type = "CellPlanned"
	CellRefused    Type = "CellRefused"
	ImageBuilt     Type = "ImageBuilt"
	SandboxStarted Type = "SandboxStarted"
	Started        Type = "Started"
	Message        Type = "Message"
	Command        Type = "Command"
	FileChange     Type = "FileChange"
	ToolCall       Type = "ToolCall"
	Usage          Type = "Usage"
	Operation      Type = "Operation"
	EgressDecision Type = "EgressDecision"
	ModelCall      Type = "ModelCall"
	Finished       Type = "Finished"
	StepStarted    Type = "StepStarted"
	StepVerdict    Type = "StepVerdict"
	VerifyStarted  Type = "VerifyStarted"
	Verdict        Type = "Verdict"
	CellErrored    Type = "CellErrored"
	CellSuperseded Type = "CellSuperseded"
	RunFinished    Type = "RunFinished"
	RunResumed     Type = "RunResumed"
	RunControl     Type = "RunControl"
	SolveFrozen    Type = "SolveFrozen"
	SolveThawed    Type = "SolveThawed"
)

// ErrUnknownType is returned by Decode for an event type this version does
// not know.
var ErrUnknownType = errors.New("events: unknown event type")

// Envelope is one event as stored on JetStream:
//
//	{"v":1,"id":"<ULID>","type":"Usage","at":"<RFC3339Nano>","run_id":"<ULID>",
//	 "cell_id":"<task>/<harness>/<model>/<repeat>","attempt":1,"source":"launcher","data":{...}}
//
// ID is also the Nats-Msg-Id, so a re-published event is dropped by the
// stream's duplicate window, and projections dedupe by ID as well.
type Envelope struct {
	V       int             `json:"v"`
	ID      string          `json:"id"`
	Type    Type            `json:"type"`
	At      time.Time       `json:"at"`
	RunID   string          `json:"run_id"`
	CellID  string          `json:"cell_id,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Source  string          `json:"source"`
	Data    json.RawMessage `json:"data"`
}

var (
	entropyMu sync.Mutex
	entropy   = ulid.Monotonic(rand.Reader, 0)
)

// NewID returns a new ULID string; IDs from one process are strictly
// increasing.
func NewID() string {
	entropyMu.Lock()
	defer entropyMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(time.Now()), entropy).String()
}

// RunOnceID is the id of an event the run has once per key, the same for
// every process that derives it: a ULID whose time is the run id's (a
// ULID; the Unix epoch for another id) and whose random part is a hash of
// run and key. A publisher sets it as the event's id (its Nats-Msg-Id),
// so two publishers of the event within the stream's duplicate window
// store it once, and the projection, which dedupes by id, folds it once.
func RunOnceID(runID, key string) string {
	var ms uint64
	if u, err := ulid.ParseStrict(runID); err == nil {
		ms = u.Time()
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s", runID, key))
	var id ulid.ULID
	if err := id.SetTime(ms); err != nil {
		panic(err) // a ULID's time always fits
	}
	if err := id.SetEntropy(sum[:10]); err != nil {
		panic(err)
	}
	return id.String()
}

// RunFinishedID is the RunOnceID of the RunFinished that closes epoch of
// runID: another epoch's is another id.
func RunFinishedID(runID string, epoch int) string {
	return RunOnceID(runID, "RunFinished/"+strconv.Itoa(epoch))
}

// New builds an envelope with a fresh ID and the current UTC time. data is
// one of the *Data types of this package (or nil for an empty object).
func New(t Type, runID, cellID string, attempt int, source string, data any) (Envelope, error) {
	raw := json.RawMessage("{}")
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return Envelope{}, fmt.Errorf("events: encode %s data: %w", t, err)
		}
		raw = b
	}
	return Envelope{
		V: Version, ID: NewID(), Type: t, At: time.Now().UTC(),
		RunID: runID, CellID: cellID, Attempt: attempt, Source: source, Data: raw,
	}, nil
}

// Must is New that panics on an encoding error; for data types that cannot
// fail to encode.
func Must(t Type, runID, cellID string, attempt int, source string, data any) Envelope {
	e, err := New(t, runID, cellID, attempt, source, data)
	if err != nil {
		panic(err)
	}
	return e
}

// Encode returns the envelope's JSON bytes, the same bytes json.Marshal
// gives (field order, omitted empty cell_id and attempt, RFC 3339 time with
// nanoseconds), built without re-encoding the data: e.Data must be valid
// JSON, as New and Decode guarantee. The error is for interface stability;
// it is always nil.
func Encode(e Envelope) ([]byte, error) {
	// The keys, punctuation, time and numbers take under 160 bytes; the
	// strings and data the rest (one allocation unless a string needs
	// escaping).
	b := make([]byte, 0, 160+len(e.ID)+len(e.Type)+len(e.RunID)+len(e.CellID)+len(e.Source)+len(e.Data))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, string(e.Type))
	b = append(b, `,"at":"`...)
	b = e.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","run_id":`...)
	b = appendString(b, e.RunID)
	if e.CellID != "" {
		b = append(b, `,"cell_id":`...)
		b = appendString(b, e.CellID)
	}
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	b = append(b, `,"source":`...)
	b = appendString(b, e.Source)
	b = append(b, `,"data":`...)
	if len(e.Data) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Data...)
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string; plain ASCII (the ids, types and
// cell ids of this package) is copied as is, anything else goes through
// encoding/json for its escaping rules.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Decode parses an envelope and checks its version and type. The data is
// left raw; use DecodeData to obtain the typed value.
func Decode(b []byte) (Envelope, error) {
	return decode(b, nil)
}

// A Decoder decodes envelopes as Decode does, for a reader of many events.
// The zero value is ready to use; a Decoder is not safe for concurrent
// use. Owned says the caller never reuses the bytes it passes (a NATS
// message's payload, which the client allocates per message): the
// envelope's Data then aliases them instead of a copy.
//
// The strings that repeat from one event to the next (type, run id, cell
// id, source) are allocated once and shared, up to decoderStrings distinct
// values.
type Decoder struct {
	Owned bool
	strs  map[string]string
	last  [slots]string // per field, the value of the event before
}

// The envelope fields a Decoder shares, each with its own last value.
const (
	slotType = iota
	slotRun
	slotCell
	slotSource
	slots
)

// decoderStrings bounds the strings one Decoder keeps (bytes: about 100
// per entry), so a long read over many runs stays bounded.
const decoderStrings = 1 << 14

// Decode is the package's Decode with the Decoder's sharing.
func (d *Decoder) Decode(b []byte) (Envelope, error) { return decode(b, d) }

// intern returns raw as a string, the one kept earlier when there is one:
// first the slot's last value (a run's id, most sources), then the map.
func (d *Decoder) intern(raw []byte, slot int) string {
	if string(raw) == d.last[slot] {
		return d.last[slot]
	}
	if s, ok := d.strs[string(raw)]; ok {
		d.last[slot] = s
		return s
	}
	s := string(raw)
	d.last[slot] = s
	if d.strs == nil {
		d.strs = make(map[string]string)
	}
	if len(d.strs) < decoderStrings {
		d.strs[s] = s
	}
	return s
}

func decode(b []byte, d *Decoder) (Envelope, error) {
	e, ok := decodeFast(b, d)
	if !ok {
		e = Envelope{}
		if err := json.Unmarshal(b, &e); err != nil {
			return e, fmt.Errorf("events: decode envelope: %w", err)
		}
	}
	if e.V != Version {
		return e, fmt.Errorf("events: envelope version %d, want %d", e.V, Version)
	}
	if _, ok := dataTypes[e.Type]; !ok {
		return e, fmt.Errorf("%w %q", ErrUnknownType, e.Type)
	}
	if e.ID == "" || e.RunID == "" {
		return e, fmt.Errorf("events: %s event without id or run_id", e.Type)
	}
	return e, nil
}

// DecodeData decodes the envelope's data into a new value of the type
// registered for e.Type (a pointer, e.g. *VerdictData).
func DecodeData(e Envelope) (any, error) {
	mk, ok := dataTypes[e.Type]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, e.Type)
	}
	v := mk()
	if len(e.Data) > 0 {
		if err := json.Unmarshal(e.Data, v); err != nil {
			return nil, fmt.Errorf("events: decode %s data of %s: %w", e.Type, e.ID, err)
		}
	}
	return v, nil
}

// Into decodes the envelope's data into v.
func Into(e Envelope, v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("events: decode %s data of %s: %w", e.Type, e.ID, err)
	}
	return nil
}

// CellHash is the subject token for a cell id: the first 16 hex digits of
// its SHA-256 (cell ids hold '/', ':' and '.', which subjects cannot).
func CellHash(cellID string) string {
	if h := lastCellHash.Load(); h != nil && h.cell == cellID {
		return h.hash
	}
	s := sha256.Sum256([]byte(cellID))
	h := hex.EncodeToString(s[:8])
	lastCellHash.Store(&cellHash{cellID, h})
	return h
}

// cellHash is CellHash's last answer: a cell's events come one after
// another (an agent's lines), so the hash is computed once per run of them.
type cellHash struct{ cell, hash string }

var lastCellHash atomic.Pointer[cellHash]

// CellID formats the cell id "<task>/<harness>/<model>/<repeat>".
func CellID(task, harness, model string, repeat int) string {
	return fmt.Sprintf("%s/%s/%s/%d", task, harness, model, repeat)
}

// Subject returns the subject an event is published on:
// proctor.run.<run_id>.<type> for run-level events and
// proctor.run.<run_id>.cell.<cell_hash>.<type> for cell events.
func Subject(e Envelope) string {
	if e.CellID == "" {
		return RunSubject(e.RunID, e.Type)
	}
	return CellSubject(e.RunID, e.CellID, e.Type)
}

// RunSubject is the subject of a run-level event.
func RunSubject(runID string, t Type) string { return "proctor.run." + runID + "." + string(t) }

// CellSubject is the subject of a cell event.
func CellSubject(runID, cellID string, t Type) string {
	return "proctor.run." + runID + ".cell." + CellHash(cellID) + "." + string(t)
}

// RunFilter matches every event of one run.
func RunFilter(runID string) string { return "proctor.run." + runID + ".>" }

// TypeFilter matches one event type across runs and cells, e.g.
// proctor.run.*.cell.*.Usage. Run-level types use proctor.run.*.<type>.
func TypeFilter(t Type) string {
	if IsRunLevel(t) {
		return "proctor.run.*." + string(t)
	}
	return "proctor.run.*.cell.*." + string(t)
}

// IsRunLevel reports whether events of type t carry no cell id.
func IsRunLevel(t Type) bool {
	switch t {
	case RunRequested, RunPlanned, RunFinished, RunResumed, RunControl:
		return true
	}
	return false
}

// Types returns every event type in DESIGN §7 order.
func Types() []Type {
	return []Type{RunRequested, RunPlanned, CellPlanned, CellRefused, ImageBuilt,
		SandboxStarted, Started, Message, Command, FileChange, ToolCall, Usage,
		Operation, EgressDecision, ModelCall, StepStarted, StepVerdict, Finished, VerifyStarted,
		Verdict, CellErrored, CellSuperseded, RunFinished, RunResumed, RunControl,
		SolveFrozen, SolveThawed}
}

// DataType returns a new zero value of the data type registered for t.
func DataType(t Type) (any, bool) {
	mk, ok := dataTypes[t]
	if !ok {
		return nil, false
	}
	return mk(), true
}

var dataTypes = map[Type]func() any{
	RunRequested:   func() any { return new(RunRequestedData) },
	RunPlanned:     func() any { return new(RunPlannedData) },
	CellPlanned:    func() any { return new(CellPlannedData) },
	CellRefused:    func() any { return new(CellRefusedData) },
	ImageBuilt:     func() any { return new(ImageBuiltData) },
	SandboxStarted: func() any { return new(SandboxStartedData) },
	Started:        func() any { return new(StartedData) },
	Message:        func() any { return new(MessageData) },
	Command:        func() any { return new(CommandData) },
	FileChange:     func() any { return new(FileChangeData) },
	ToolCall:       func() any { return new(ToolCallData) },
	Usage:          func() any { return new(UsageData) },
	Operation:      func() any { return new(OperationData) },
	EgressDecision: func() any { return new(EgressDecisionData) },
	ModelCall:      func() any { return new(ModelCallData) },
	Finished:       func() any { return new(FinishedData) },
	StepStarted:    func() any { return new(StepStartedData) },
	StepVerdict:    func() any { return new(StepVerdictData) },
	VerifyStarted:  func() any { return new(VerifyStartedData) },
	Verdict:        func() any { return new(VerdictData) },
	CellErrored:    func() any { return new(CellErroredData) },
	CellSuperseded: func() any { return new(CellSupersededData) },
	RunFinished:    func() any { return new(RunFinishedData) },
	RunResumed:     func() any { return new(RunResumedData) },
	RunControl:     func() any { return new(RunControlData) },
	SolveFrozen:    func() any { return new(SolveFrozenData) },
	SolveThawed:    func() any { return new(SolveThawedData) },
}
