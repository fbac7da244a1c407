package harness

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// stream is the state of one solve whose stdout speaks the event-line
// protocol (DESIGN §5.1): what it said so far. Lines are handed from the
// output reader to one worker goroutine that parses and publishes them in
// order, so reading the sandbox's output and encoding events overlap.
type stream struct {
	env       Env
	ctx       context.Context
	queue     chan streamLine
	done      chan struct{}
	mu        sync.Mutex
	started   bool
	anything  bool
	usage     bool
	finished  *events.FinishedData
	response  *cellfs.Capture // response.txt: every response-text line
	longLines int             // lines over the line bound: text, never events
	lowOps    map[string]int  // low-fidelity operations by type (noteLow)
	// printed counts the Command texts the agent printed, for the
	// recorder's commands (publishRecorded).
	printed    map[string]int
	publishErr error
	// fields is the worker's decoding space, reused line after line.
	fields lineFields
}

type rawLine struct {
	text string
	at   time.Time
}

// streamLine is one line read, or a piece of an overlong one.
type streamLine struct {
	rawLine
	// truncated: text is the first part of a line over the bound; rest:
	// text is a later piece of it; end: the line ended.
	truncated, rest, end bool
}

// newStream starts the worker; feed lines to it, then call wait.
// response receives the response text (nil: dropped).
func newStream(ctx context.Context, env Env, response *cellfs.Capture) *stream {
	r := &stream{env: env, ctx: ctx, queue: make(chan streamLine, 4096), done: make(chan struct{}), response: response}
	go func() {
		defer close(r.done)
		for l := range r.queue {
			if l.rest {
				r.restPiece(l.text, l.end)
				continue
			}
			r.line(l.text, l.at, l.truncated)
		}
	}()
	return r
}

// feed is the sandbox.Lines callback: it queues one line with the time it
// was read.
func (r *stream) feed(text string, truncated bool) {
	r.queue <- streamLine{rawLine: rawLine{text, time.Now()}, truncated: truncated}
}

// feedRest is the sandbox.NewLinesRest callback: it queues a piece of an
// overlong line, or its end.
func (r *stream) feedRest(piece string, end bool) {
	r.queue <- streamLine{rawLine: rawLine{text: piece}, rest: true, end: end}
}

// lines returns the writer that splits the solve's stdout into the
// stream's lines: overlong lines are handed on whole when the stream keeps
// the response text.
func (r *stream) lines() *sandbox.Lines {
	if r.response == nil {
		return sandbox.NewLines(r.feed, 0)
	}
	return sandbox.NewLinesRest(r.feed, r.feedRest, 0)
}

// wait stops the worker after the queued lines are handled.
func (r *stream) wait() {
	close(r.queue)
	<-r.done
}

// publish records one event of the solve at time at (zero: now).
func (r *stream) publish(t events.Type, data any, at time.Time) {
	if err := r.env.Emit(r.ctx, t, data, at); err != nil && r.publishErr == nil {
		r.publishErr = err
	}
}

func (r *stream) ensureStarted(at time.Time) {
	if !r.started {
		r.started = true
		r.publish(events.Started, events.StartedData{Harness: r.env.Plan().Harness, Model: r.env.Plan().Model, Synthesized: true}, at)
	}
}

// line handles one stdout line under the event-line protocol. A
// truncated line (the first part of one over the line bound) is response
// text whatever it starts with: its rest follows through restPiece.
func (r *stream) line(text string, readAt time.Time, truncated bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := Line{Kind: LineText, Text: text, At: readAt}
	if truncated {
		r.longLines++
	} else {
		l = parseLine(text, readAt, &r.fields)
	}
	r.anything = true
	switch l.Kind {
	case LineText:
		r.noteLow(text)
		// All of it goes to response.txt (capped like the logs); its tail
		// keeps the end, where an agent's final answer is.
		if r.response != nil {
			if !truncated {
				text += "\n"
			}
			_, _ = io.WriteString(r.response, text)
		}
		return
	case LineEvent:
		switch l.Type {
		case events.Started:
			if r.started {
				return
			}
			r.started = true
			d := l.Data.(*events.StartedData)
			d.Harness, d.Model = r.env.Plan().Harness, r.env.Plan().Model
			r.publish(events.Started, d, l.At)
			return
		case events.Finished:
			// Folded into the arm's own Finished, which adds the exit
			// code, timing and output tail.
			r.finished = l.Data.(*events.FinishedData)
			return
		case events.Usage:
			r.usage = true
		}
	}
	r.ensureStarted(l.At)
	if c, ok := l.Data.(*events.CommandData); ok {
		if r.printed == nil {
			r.printed = map[string]int{}
		}
		r.printed[c.Command]++
	}
	r.publish(l.Type, l.Data, l.At)
}

// restPiece writes a later piece of an overlong response line to
// response.txt, and its newline at the line's end.
func (r *stream) restPiece(piece string, end bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if end {
		piece += "\n"
	}
	_, _ = io.WriteString(r.response, piece)
}

// StreamEvents returns a writer that turns the lines written to it into
// the cell's events under the event-line protocol (a Started is
// synthesised before the first other event), as an agent's stdout is, and
// a function that ends the stream once the writer has been fed everything:
// it returns the first error of the event log.
func StreamEvents(ctx context.Context, env Env) (io.Writer, func() error) {
	r := newStream(ctx, env, nil)
	lines := r.lines()
	return lines, func() error {
		_ = lines.Close()
		r.wait()
		return r.publishErr
	}
}
