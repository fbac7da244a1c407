package bus_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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

// BenchmarkPublish compares event publishing through pkg/bus (Publish with
// Nats-Msg-Id, backpressure, Flush waiting for every ack) against raw
// PublishAsync of the same payloads on the same server, measured in the
// same run. Reported: events/s of each and their ratio (target ≥ 0.7), and
// the number of events lost (must be 0).
func BenchmarkPublish(b *testing.B) {
	n := benchEvents()
	b.ReportAllocs()
	var busRate, rawRate float64
	for i := 0; i < b.N; i++ {
		bb, _ := bustest.Bus(b)
		ctx := context.Background()
		run := events.NewID()
		evs := make([]events.Envelope, n)
		pad := strings.Repeat("x", 60)
		for j := range evs {
			evs[j] = events.Must(events.Usage, run, "t"+strconv.Itoa(j%1000)+"/oracle/default/1", 1, "bench", events.UsageData{Model: pad, PromptTokens: events.Count(int64(j))})
		}
		size := 0
		if raw, _ := events.Encode(evs[0]); raw != nil {
			size = len(raw)
		}

		// Raw baseline: PublishAsync of the encoded payloads, same subjects.
		payloads := make([][]byte, n)
		subjects := make([]string, n)
		for j, e := range evs {
			payloads[j], _ = events.Encode(e)
			subjects[j] = strings.Replace(events.Subject(e), "proctor.run.", "proctor.run.raw", 1)
		}
		js, _ := jetstream.New(bb.NC, jetstream.WithPublishAsyncMaxPending(4096))
		start := time.Now()
		for j := range payloads {
			for {
				_, err := js.PublishAsync(subjects[j], payloads[j])
				if err == nil {
					break
				}
				if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
					b.Fatal(err)
				}
			}
		}
		<-js.PublishAsyncComplete()
		rawRate = float64(n) / time.Since(start).Seconds()

		start = time.Now()
		for _, e := range evs {
			if err := bb.Publish(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		if err := bb.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		busRate = float64(n) / time.Since(start).Seconds()

		got, err := bb.Events.Info(ctx, jetstream.WithSubjectFilter(events.RunFilter(run)))
		if err != nil {
			b.Fatal(err)
		}
		var stored uint64
		for _, c := range got.State.Subjects {
			stored += c
		}
		b.ReportMetric(float64(n)-float64(stored), "lost")
		b.ReportMetric(float64(size), "bytes/event")
	}
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(busRate, "bus-events/s")
	b.ReportMetric(busRate/rawRate, "ratio(bus/raw)")
}
