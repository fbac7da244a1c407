package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-eval/proctor/pkg/events"
)

// EventRow is one event of the log, flattened for analysis (SCHEMA.md,
// table events). Data is the event's data object as JSON text, exactly as
// stored. The usage_* columns are set only on Usage events and
// command_exit_code only on Command events, from the keys the event
// carries: a key the event lacks is null, never 0.
type EventRow struct {
	V     int64  `json:"v" parquet:"v"`
	ID    string `json:"id" parquet:"id"`
	RunID string `json:"run_id" parquet:"run_id,dict"`
	// CellID and Attempt are null on run-level events.
	CellID  *string `json:"cell_id" parquet:"cell_id,optional,dict"`
	Attempt *int64  `json:"attempt" parquet:"attempt,optional"`
	Type    string  `json:"type" parquet:"type,dict"`
	// At is the event time in UTC with nanosecond precision (Parquet
	// TIMESTAMP(NANOS, isAdjustedToUTC=true)).
	At     time.Time `json:"at" parquet:"at,timestamp(nanosecond:utc)"`
	Source string    `json:"source" parquet:"source,dict"`
	Data   string    `json:"data" parquet:"data"`

	UsageModel            *string  `json:"usage_model" parquet:"usage_model,optional,dict"`
	UsagePromptTokens     *int64   `json:"usage_prompt_tokens" parquet:"usage_prompt_tokens,optional"`
	UsageCompletionTokens *int64   `json:"usage_completion_tokens" parquet:"usage_completion_tokens,optional"`
	UsageCacheReadTokens  *int64   `json:"usage_cache_read_tokens" parquet:"usage_cache_read_tokens,optional"`
	UsageCacheWriteTokens *int64   `json:"usage_cache_write_tokens" parquet:"usage_cache_write_tokens,optional"`
	UsageCostUSD          *float64 `json:"usage_cost_usd" parquet:"usage_cost_usd,optional"`
	UsageCalls            *int64   `json:"usage_calls" parquet:"usage_calls,optional"`
	CommandExitCode       *int64   `json:"command_exit_code" parquet:"command_exit_code,optional"`
}

// usageKeys decodes Usage data keeping absent keys apart from zeros.
type usageKeys struct {
	Model            *string  `json:"model"`
	PromptTokens     *int64   `json:"prompt_tokens"`
	CompletionTokens *int64   `json:"completion_tokens"`
	CacheReadTokens  *int64   `json:"cache_read_tokens"`
	CacheWriteTokens *int64   `json:"cache_write_tokens"`
	CostUSD          *float64 `json:"cost_usd"`
	Calls            *int64   `json:"calls"`
}

// Parquet nanosecond timestamps are int64 nanoseconds since the Unix epoch,
// which span the years 1678 to 2262.
var (
	minNanoTime = time.Unix(0, math.MinInt64).UTC()
	maxNanoTime = time.Unix(0, math.MaxInt64).UTC()
)

// EventRowOf flattens one envelope. It returns an error naming the event
// when the data of a Usage or Command event does not decode, or when its
// time is outside what a nanosecond timestamp holds (years 1678 to 2262,
// e.g. an unset zero time).
func EventRowOf(e events.Envelope) (EventRow, error) {
	if e.At.Before(minNanoTime) || e.At.After(maxNanoTime) {
		return EventRow{}, fmt.Errorf("dataset: event %s (%s): time %s is outside the years 1678 to 2262", e.ID, e.Type, e.At.Format(time.RFC3339Nano))
	}
	row := EventRow{
		V:      int64(e.V),
		ID:     e.ID,
		RunID:  e.RunID,
		Type:   string(e.Type),
		At:     e.At.UTC(),
		Source: e.Source,
		Data:   string(e.Data),
	}
	if e.CellID != "" {
		s := e.CellID
		row.CellID = &s
	}
	if e.Attempt != 0 {
		n := int64(e.Attempt)
		row.Attempt = &n
	}
	switch e.Type {
	case events.Usage:
		var u usageKeys
		if err := unmarshalData(e, &u); err != nil {
			return row, err
		}
		row.UsageModel, row.UsagePromptTokens, row.UsageCompletionTokens = u.Model, u.PromptTokens, u.CompletionTokens
		row.UsageCacheReadTokens, row.UsageCacheWriteTokens = u.CacheReadTokens, u.CacheWriteTokens
		row.UsageCostUSD, row.UsageCalls = u.CostUSD, u.Calls
	case events.Command:
		var c struct {
			ExitCode *int64 `json:"exit_code"`
		}
		if err := unmarshalData(e, &c); err != nil {
			return row, err
		}
		row.CommandExitCode = c.ExitCode
	}
	return row, nil
}

func unmarshalData(e events.Envelope, v any) error {
	if len(e.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("dataset: event %s (%s): decode data: %w", e.ID, e.Type, err)
	}
	return nil
}

// EventWriter streams events into one file of an events export, so a log
// of any length is written without holding it in memory. It is not safe
// for concurrent use.
type EventWriter struct {
	format string
	bw     *bufio.Writer
	enc    *json.Encoder
	pw     *parquet.GenericWriter[EventRow]
	batch  []EventRow
	closed bool
}

// NewEventWriter returns a writer of format "jsonl" or "parquet" onto w.
// jsonl writes each envelope as its own JSON (events.Envelope's encoding,
// without HTML escaping), one per line: exactly what ReadEventsJSONL reads
// back, with no promoted columns. parquet writes EventRow rows with
// ParquetWriterOptions (no page bounds for data). Close must be called to finish the file; it does
// not close w. An unknown format is an error naming the allowed ones.
func NewEventWriter(w io.Writer, format string) (*EventWriter, error) {
	ew := &EventWriter{format: format}
	switch format {
	case FormatJSONL:
		ew.bw = bufio.NewWriterSize(w, 64<<10)
		ew.enc = json.NewEncoder(ew.bw)
		ew.enc.SetEscapeHTML(false)
	case FormatParquet:
		ew.pw = parquet.NewGenericWriter[EventRow](w, ParquetWriterOptions("data")...)
		ew.batch = make([]EventRow, 0, batchRows)
	default:
		return nil, unknownFormat("export events", format, EventFormats())
	}
	return ew, nil
}

// Write appends one event. For parquet it returns EventRowOf's error for
// an event whose Usage or Command data does not decode.
func (ew *EventWriter) Write(e events.Envelope) error {
	if ew.closed {
		return errors.New("dataset: event writer: write after close")
	}
	if ew.enc != nil {
		if err := ew.enc.Encode(e); err != nil {
			return fmt.Errorf("dataset: event %s: %w", e.ID, err)
		}
		return nil
	}
	row, err := EventRowOf(e)
	if err != nil {
		return err
	}
	ew.batch = append(ew.batch, row)
	if len(ew.batch) == cap(ew.batch) {
		return ew.flushBatch()
	}
	return nil
}

func (ew *EventWriter) flushBatch() error {
	if len(ew.batch) == 0 {
		return nil
	}
	_, err := ew.pw.Write(ew.batch)
	clear(ew.batch)
	ew.batch = ew.batch[:0]
	if err != nil {
		return fmt.Errorf("dataset: write events parquet: %w", err)
	}
	return nil
}

// Close writes what is buffered and the file's footer. It is safe to call
// more than once; only the first call writes.
func (ew *EventWriter) Close() error {
	if ew.closed {
		return nil
	}
	ew.closed = true
	if ew.bw != nil {
		return ew.bw.Flush()
	}
	if err := ew.flushBatch(); err != nil {
		return err
	}
	if err := ew.pw.Close(); err != nil {
		return fmt.Errorf("dataset: write events parquet: %w", err)
	}
	return nil
}

// ExportEvents writes evs to w in format "jsonl" or "parquet" (see
// NewEventWriter), in the order given. w is not closed.
func ExportEvents(evs []events.Envelope, w io.Writer, format string) error {
	ew, err := NewEventWriter(w, format)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if err := ew.Write(e); err != nil {
			return err
		}
	}
	return ew.Close()
}

// ReadEventsJSONL reads a whole events jsonl export into memory (see
// ScanEventsJSONL for the rules and errors). The envelopes equal the
// exported ones field for field, data bytes included.
func ReadEventsJSONL(r io.Reader) ([]events.Envelope, error) {
	var out []events.Envelope
	err := ScanEventsJSONL(r, func(e events.Envelope) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// ScanEventsJSONL reads an events jsonl export line by line and calls fn
// with each envelope, in file order, without holding the file in memory.
// Each line is one envelope checked by events.Decode (envelope version,
// known type, id and run_id present); data is kept raw, byte for byte.
// Blank lines are skipped, a trailing '\r' is ignored, and lines may be of
// any length. A line that does not decode is an error naming its number
// ("dataset: events jsonl line 7: ..."); an error from fn stops the scan
// and is returned as is.
func ScanEventsJSONL(r io.Reader, fn func(events.Envelope) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("dataset: events jsonl line %d: %w", line, err)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			e, derr := decodeLine(t)
			if derr != nil {
				return fmt.Errorf("dataset: events jsonl line %d: %w", line, derr)
			}
			if ferr := fn(e); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// decodeLine decodes one envelope and refuses anything after it.
func decodeLine(b []byte) (events.Envelope, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return events.Envelope{}, err
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return events.Envelope{}, errors.New("unexpected text after the envelope")
	}
	return events.Decode(raw)
}
