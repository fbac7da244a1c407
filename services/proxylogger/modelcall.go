package proxylogger

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// ModelCall is one request the gateway served on a provider's host (see
// events.ModelCallData for its fields; the cost is the recorder's to
// add). Every string is passed through Redact.
type ModelCall struct {
	// Time is when the call ended (its response's last byte, or its
	// failure).
	Time time.Time `json:"time"`
	// Cell is Config.Cell.
	Cell string `json:"cell,omitempty"`
	events.ModelCallData
}

// ModelSink receives model calls. The proxy calls it from one goroutine
// at a time, in the order the calls end.
type ModelSink func(ModelCall)

// recordCall sends a call to the model sink, with the connection's fields
// filled in.
func (c *conn) recordCall(d events.ModelCallData) {
	if c.p.cfg.ModelSink == nil {
		return
	}
	d.Conn = c.id
	d.Host, d.Path, d.Model, d.Error = Redact(d.Host), Redact(d.Path), Redact(d.Model), Redact(d.Error)
	m := ModelCall{Time: time.Now(), Cell: Redact(c.p.cfg.Cell), ModelCallData: d}
	c.p.callMu.Lock()
	defer c.p.callMu.Unlock()
	c.p.cfg.ModelSink(m)
}

// CallJSONL writes model calls as model_calls.jsonl lines: one JSON object
// per line with time (RFC 3339, UTC, nanoseconds), cell and the fields of
// events.ModelCallData. It is safe for concurrent use.
type CallJSONL struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewCallJSONL returns a CallJSONL writing to w. The caller closes w.
func NewCallJSONL(w io.Writer) *CallJSONL { return &CallJSONL{w: w} }

// Record writes m as one line. After a write error it writes nothing
// more; Err returns the error.
func (j *CallJSONL) Record(m ModelCall) {
	m.Time = m.Time.UTC()
	b, err := json.Marshal(m)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return
	}
	if err != nil {
		j.err = err
		return
	}
	_, j.err = j.w.Write(append(b, '\n'))
}

// Err returns the first error Record met, or nil.
func (j *CallJSONL) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}
