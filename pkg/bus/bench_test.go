package bus_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/events"
)

func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("PROCTOR_BENCH_PUBLISH")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

// publishRounds is how many rounds BenchmarkPublish takes the best of, per
// side (each round starts with another side).
const publishRounds = 3

// BenchmarkPublish compares event publishing through pkg/bus (Publish with
// Nats-Msg-Id, backpressure, Flush waiting for every ack) against its
// floor measured in the same run on the same server: raw PublishMsgAsync
// of the same encoded payloads, prepared beforehand, each with its
// Nats-Msg-Id (the dedupe DESIGN §7 requires of every event, which alone
// costs the server about a third of the bare rate). Reported: events/s of
// each, ratio(bus/raw-msgid) (target ≥ 0.9) and the number of events lost
// (must be 0); beside them the bare publish with no header (raw-events/s)
// and the bus's ratio to it, ratio(bus/raw). As in BenchmarkAgentEventLines,
// each side starts from an empty event stream and a collected heap, the
// rounds alternate which side goes first, and each side's rate is its best
// of publishRounds: a stream grown by the side before had slowed whichever
// side came second.
func BenchmarkPublish(b *testing.B) {
	n := benchEvents()
	b.ReportAllocs()
	var busRate, rawRate, idRate float64
	for i := 0; i < b.N; i++ {
		bb, _ := bustest.Bus(b)
		ctx := context.Background()
		pad := strings.Repeat("x", 60)
		// Every round of the bus side publishes envelopes of its own (a new
		// run, new ids): the stream's duplicate window outlives a purge.
		mk := func() (string, []events.Envelope) {
			run := events.NewID()
			evs := make([]events.Envelope, n)
			for j := range evs {
				evs[j] = events.Must(events.Usage, run, "t"+strconv.Itoa(j%1000)+"/oracle/default/1", 1, "bench", events.UsageData{Model: pad, PromptTokens: events.Count(int64(j))})
			}
			return run, evs
		}
		_, evs := mk()
		size := 0
		if raw, _ := events.Encode(evs[0]); raw != nil {
			size = len(raw)
		}
		fresh := func() {
			if err := bb.Events.Purge(ctx); err != nil {
				b.Fatal(err)
			}
			runtime.GC()
		}

		// Raw baseline: PublishAsync of the encoded payloads, same subjects.
		payloads := make([][]byte, n)
		subjects := make([]string, n)
		for j, e := range evs {
			payloads[j], _ = events.Encode(e)
			subjects[j] = strings.Replace(events.Subject(e), "proctor.run.", "proctor.run.raw", 1)
		}
		js, _ := jetstream.New(bb.NC, jetstream.WithPublishAsyncMaxPending(4096))
		// publish sends prepared messages with PublishMsgAsync on an empty
		// stream and waits for every ack: events/s.
		publish := func(msgs []*nats.Msg) float64 {
			fresh()
			start := time.Now()
			for _, m := range msgs {
				for {
					_, err := js.PublishMsgAsync(m)
					if err == nil {
						break
					}
					if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
						b.Fatal(err)
					}
				}
			}
			<-js.PublishAsyncComplete()
			return float64(n) / time.Since(start).Seconds()
		}
		rawMsgs := make([]*nats.Msg, n)
		for j := range payloads {
			rawMsgs[j] = &nats.Msg{Subject: subjects[j], Data: payloads[j]}
		}
		raw := func() float64 { return publish(rawMsgs) }
		// The same with each payload's Nats-Msg-Id, prepared beforehand:
		// the dedupe the design requires, without pkg/bus.
		rawID := func() float64 {
			_, evs := mk()
			msgs := make([]*nats.Msg, n)
			for j, e := range evs {
				data, _ := events.Encode(e)
				msgs[j] = &nats.Msg{Subject: subjects[j], Data: data, Header: nats.Header{nats.MsgIdHdr: []string{e.ID}}}
			}
			return publish(msgs)
		}
		var lost uint64
		through := func() float64 {
			run, evs := mk()
			fresh()
			start := time.Now()
			for _, e := range evs {
				if err := bb.Publish(ctx, e); err != nil {
					b.Fatal(err)
				}
			}
			if err := bb.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			rate := float64(n) / time.Since(start).Seconds()
			got, err := bb.Events.Info(ctx, jetstream.WithSubjectFilter(events.RunFilter(run)))
			if err != nil {
				b.Fatal(err)
			}
			var stored uint64
			for _, c := range got.State.Subjects {
				stored += c
			}
			lost = max(lost, uint64(n)-stored)
			return rate
		}
		sides := []func(){
			func() { rawRate = max(rawRate, raw()) },
			func() { idRate = max(idRate, rawID()) },
			func() { busRate = max(busRate, through()) },
		}
		for r := range publishRounds {
			for k := range sides {
				sides[(r+k)%len(sides)]()
			}
		}
		b.ReportMetric(float64(lost), "lost")
		b.ReportMetric(float64(size), "bytes/event")
	}
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(busRate, "bus-events/s")
	b.ReportMetric(busRate/rawRate, "ratio(bus/raw)")
	b.ReportMetric(idRate, "raw-msgid-events/s")
	b.ReportMetric(busRate/idRate, "ratio(bus/raw-msgid)")
}
