package proxylogger

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/events"
)

// Decision values.
const (
	Allowed = "allowed"
	Denied  = "denied"
	Error   = "error"
)

// Decision is one record of the proxy. A connection yields one decision
// record (Closed false): allowed (written before the upstream connect, so a
// pending CONNECT is on record), denied, or error. An allowed connection
// that reached its upstream, or failed after the allowed record, yields a
// second record at close (Closed true, same Conn) carrying the byte counts
// and the whole duration; its Decision is allowed, or error when the
// upstream connect or the forwarded request failed. Every string is passed
// through Redact.
type Decision struct {
	// Time is when the record was made.
	Time time.Time
	// Cell is Config.Cell.
	Cell string
	// Conn numbers the proxy's connections from 1; the decision and close
	// records of one connection share it.
	Conn uint64
	// Method is the request method (CONNECT, GET, ...), "" when the request
	// could not be read.
	Method string
	// Host and Port are the request-target authority (normalised host).
	Host string
	Port int
	// Decision is Allowed, Denied or Error.
	Decision string
	// Reason says why (the rule that denied, the error).
	Reason string
	// Status is the HTTP status the proxy answered the client with, or the
	// upstream's status for a forwarded plain-HTTP request.
	Status int
	// Resolved lists the upstream addresses the host resolved to.
	Resolved []string
	// Upstream is the address connected to ("ip:port"), on close records.
	Upstream string
	// Closed marks the close record of an allowed connection.
	Closed bool
	// BytesUp counts bytes from the client to the upstream, BytesDown bytes
	// from the upstream to the client (the tunnel's payload for CONNECT,
	// the request and response as written for plain HTTP). Set on close
	// records.
	BytesUp, BytesDown int64
	// Duration runs from the accept of the client connection to this
	// record.
	Duration time.Duration
}

// Sink receives decisions. The proxy calls it from one goroutine at a time
// (calls are serialised), in the order the records are made.
type Sink func(Decision)

// Tee returns a Sink that calls each non-nil sink in turn.
func Tee(sinks ...Sink) Sink {
	return func(d Decision) {
		for _, s := range sinks {
			if s != nil {
				s(d)
			}
		}
	}
}

// line is a Decision as one egress.jsonl line.
type line struct {
	Time        string   `json:"time"`
	Cell        string   `json:"cell,omitempty"`
	Conn        uint64   `json:"conn"`
	Method      string   `json:"method"`
	Host        string   `json:"host"`
	Port        int      `json:"port"`
	Decision    string   `json:"decision"`
	Reason      string   `json:"reason,omitempty"`
	Status      int      `json:"status,omitempty"`
	Resolved    []string `json:"resolved,omitempty"`
	Upstream    string   `json:"upstream,omitempty"`
	Closed      bool     `json:"closed,omitempty"`
	BytesUp     int64    `json:"bytes_up"`
	BytesDown   int64    `json:"bytes_down"`
	DurationSec float64  `json:"duration_sec"`
}

// JSONL writes decisions as egress.jsonl lines: one JSON object per line
// with time (RFC 3339, UTC, nanoseconds), cell, conn, method, host, port,
// decision, reason, status, resolved, upstream, closed, bytes_up and
// bytes_down (bytes), duration_sec (seconds). It is safe for concurrent use.
type JSONL struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewJSONL returns a JSONL writing to w. The caller closes w.
func NewJSONL(w io.Writer) *JSONL { return &JSONL{w: w} }

// Record writes d as one line. After a write error it writes nothing more;
// Err returns the error.
func (j *JSONL) Record(d Decision) {
	b, err := json.Marshal(line{
		Time: d.Time.UTC().Format(time.RFC3339Nano), Cell: Redact(d.Cell), Conn: d.Conn,
		Method: Redact(d.Method), Host: Redact(d.Host), Port: d.Port, Decision: d.Decision,
		Reason: Redact(d.Reason), Status: d.Status, Resolved: d.Resolved, Upstream: d.Upstream,
		Closed: d.Closed, BytesUp: d.BytesUp, BytesDown: d.BytesDown, DurationSec: d.Duration.Seconds(),
	})
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
func (j *JSONL) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// EventData returns the data of the EgressDecision event for d (the cell is
// the envelope's, not the data's), with every string redacted.
func EventData(d Decision) events.EgressDecisionData {
	return events.EgressDecisionData{
		Host: Redact(d.Host), Port: d.Port, Method: Redact(d.Method), Decision: d.Decision,
		Reason: Redact(d.Reason), Conn: d.Conn, Status: d.Status, Resolved: d.Resolved,
		Upstream: d.Upstream, Closed: d.Closed, BytesUp: d.BytesUp, BytesDown: d.BytesDown,
		DurationSec: d.Duration.Seconds(),
	}
}

// Redacted replaces the userinfo of a URL.
const Redacted = egress.Redacted

// Redact replaces the userinfo (user name and password) of every URL in s,
// "http://user:pw@proxy:3128" → "http://REDACTED@proxy:3128", and of a
// proxy address written without a scheme, "user:pw@proxy:3128" →
// "REDACTED@proxy:3128" (egress.RedactCredentials), and returns the rest of
// s unchanged. Both the user name and the password go: a token is often
// passed as the user name.
func Redact(s string) string {
	return egress.RedactCredentials(s)
}
