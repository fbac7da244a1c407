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
// "<run> <cell> <queued ns> <taken, Unix ns>" lines; every other record
// goes to next when next is enabled for its level.
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
			_, err := fmt.Fprintf(h.w, "%s %s %d %d\n", run, cell, queued.Nanoseconds(), r.Time.UnixNano())
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

// claim is the first delivery of a launch job to a worker node.
type claim struct {
	worker, run, cell string
	queued            time.Duration // stored on the work queue to taken
	at                time.Time     // taken
}

// readClaims reads the claims files under dir whose name starts with
// prefix (<worker>.claims): each first delivery of a launch job.
func readClaims(dir, prefix string) ([]claim, error) {
	files, err := filepath.Glob(filepath.Join(dir, prefix+"*.claims"))
	if err != nil {
		return nil, err
	}
	var out []claim
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		worker := strings.TrimSuffix(filepath.Base(f), ".claims")
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 4 {
				continue // a line cut by a kill -9
			}
			ns, err1 := strconv.ParseInt(fs[2], 10, 64)
			at, err2 := strconv.ParseInt(fs[3], 10, 64)
			if err1 == nil && err2 == nil {
				out = append(out, claim{worker: worker, run: fs[0], cell: fs[1], queued: time.Duration(ns), at: time.Unix(0, at)})
			}
		}
		fh.Close()
	}
	return out, nil
}
