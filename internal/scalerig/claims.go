package scalerig

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/services/launcher"
)

// claimHandler is a worker's log handler: the launcher's claim lines
// (launcher.ClaimedMsg, at debug level) of a first delivery go to w as
// "<run> <cell> <queued ns>" lines; every other record goes to next when
// next is enabled for its level.
type claimHandler struct {
	next slog.Handler
	mu   *sync.Mutex
	w    io.Writer
}

func (h claimHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug
}

func (h claimHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == launcher.ClaimedMsg {
		var run, cell string
		var delivery uint64
		var queued time.Duration
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "run":
				run = a.Value.String()
			case "cell":
				cell = a.Value.String()
			case "delivery":
				delivery = a.Value.Uint64()
				if a.Value.Kind() == slog.KindInt64 {
					delivery = uint64(a.Value.Int64())
				}
			case "queued":
				queued = a.Value.Duration()
			}
			return true
		})
		if delivery == 1 {
			h.mu.Lock()
			defer h.mu.Unlock()
			_, err := fmt.Fprintf(h.w, "%s %s %d\n", run, cell, queued.Nanoseconds())
			return err
		}
		return nil
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h claimHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return claimHandler{next: h.next.WithAttrs(as), mu: h.mu, w: h.w}
}

func (h claimHandler) WithGroup(name string) slog.Handler {
	return claimHandler{next: h.next.WithGroup(name), mu: h.mu, w: h.w}
}

// readClaims reads the claims files under dir whose name starts with
// prefix: the queued time of each first delivery of a launch job.
func readClaims(dir, prefix string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*.claims"))
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 3 {
				continue // a line cut by a kill -9
			}
			if ns, err := strconv.ParseInt(fs[2], 10, 64); err == nil {
				out = append(out, time.Duration(ns))
			}
		}
		fh.Close()
	}
	return out, nil
}
