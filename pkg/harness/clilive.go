package harness

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// lineFolder folds an agent CLI's JSON lines into events (claudeStream,
// codexStream).
type lineFolder interface {
	line(text string) []claudeEvent
}

// cliLive is the live half of an agent CLI's solve: the lines read from
// the exec's stdout, folded and published in order by one goroutine, a
// Started (the plan's harness and model) before the first event. After
// the solve, replay publishes from the collected file (the authority)
// what the live reader missed.
type cliLive struct {
	ctx   context.Context
	env   Env
	fresh func() lineFolder
	queue chan rawLine
	done  chan struct{}
	// onLine, when set, is called after each line is folded (from the
	// worker goroutine, mu held).
	onLine func(at time.Time)

	mu         sync.Mutex
	fold       lineFolder
	started    bool
	emitted    int  // lines whose events were published live, in order
	stopped    bool // a line was cut (over the line cap): the rest waits for the file
	publishErr error
}

func newCLILive(ctx context.Context, env Env, fresh func() lineFolder, onLine func(time.Time)) *cliLive {
	l := &cliLive{ctx: ctx, env: env, fresh: fresh, fold: fresh(), queue: make(chan rawLine, 4096), done: make(chan struct{}), onLine: onLine}
	go func() {
		defer close(l.done)
		for r := range l.queue {
			l.handle(r)
		}
	}()
	return l
}

func (l *cliLive) feed(text string, truncated bool) {
	if truncated {
		text = "\x00truncated"
	}
	l.queue <- rawLine{text, time.Now()}
}

func (l *cliLive) handle(r rawLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || r.text == "\x00truncated" {
		l.stopped = true
		return
	}
	for _, ev := range l.fold.line(r.text) {
		l.publish(ev, r.at)
	}
	l.emitted++
	if l.onLine != nil {
		l.onLine(r.at)
	}
}

// publish records one event, a Started (the plan's harness and model)
// before the first; mu held.
func (l *cliLive) publish(ev claudeEvent, at time.Time) {
	plan := l.env.Plan()
	if ev.Type == events.Started {
		if l.started {
			return
		}
		ev.Data = events.StartedData{Harness: plan.Harness, Model: plan.Model}
	}
	if !l.started {
		l.started = true
		if ev.Type != events.Started {
			l.emit(events.Started, events.StartedData{Harness: plan.Harness, Model: plan.Model, Synthesized: true}, at)
		}
	}
	l.emit(ev.Type, ev.Data, at)
}

func (l *cliLive) emit(t events.Type, data any, at time.Time) {
	if err := l.env.Emit(l.ctx, t, data, at); err != nil && l.publishErr == nil {
		l.publishErr = err
	}
}

// wait closes the queue and waits for the worker to publish it all.
func (l *cliLive) wait() {
	close(l.queue)
	<-l.done
}

// replay folds the collected stream text (read back with error rerr) with
// a fresh folder, publishing the events of the lines the live reader did
// not, and a Started when nothing was published; it returns the folder
// that saw every line (the live one when the file could not be read) and
// whether the text ends in an unterminated line (never read as an
// event). mu is held on return: the caller unlocks.
func (l *cliLive) replay(text string, rerr error) (lineFolder, bool) {
	l.mu.Lock()
	f, truncated := l.fold, false
	if rerr == nil {
		truncated = text != "" && !strings.HasSuffix(text, "\n")
		all := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		if truncated {
			all = all[:len(all)-1]
		}
		if text == "" {
			all = nil
		}
		f = l.fresh()
		now := time.Now()
		for i, line := range all {
			evs := f.line(line)
			if i >= l.emitted {
				for _, ev := range evs {
					l.publish(ev, now)
				}
			}
		}
	}
	if !l.started {
		l.publish(claudeEvent{Type: events.Started}, time.Time{})
	}
	return f, truncated
}
