package projection

import (
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
)

// logBuilder gives a test add, which appends an event of run to its log
// one second after the one before (the first one second after start), and
// evs, which returns the log so far.
func logBuilder(run string, start time.Time) (add func(typ events.Type, cell string, data any), evs func() []events.Envelope) {
	at := start
	var log []events.Envelope
	add = func(typ events.Type, cell string, data any) {
		e := events.Must(typ, run, cell, 1, "test", data)
		at = at.Add(time.Second)
		e.At = at
		log = append(log, e)
	}
	return add, func() []events.Envelope { return log }
}
