package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// EgressFor returns the egress proxy of an in-container arm's sandbox for
// task t (DESIGN §6): the task's allowlist (`environment.egress` /
// `sandbox.egress` / `allowed_hosts`, when its agent policy is allowlist,
// or public with an egress list: agentAllowlist) plus extra, or nil when
// there is no list and extra is empty (no proxy: no way out at all).
//
// extra is the hook for an arm's own hosts: an arm whose harness must
// reach a host whatever the task says (a model provider's API) passes it
// here in its Prepare, e.g. EgressFor(t, "api.anthropic.com"), and its
// sandbox gets a proxy that allows the host, every request logged. Entries
// use the proxy-logger's syntax (host, host:port, IP literal, "private:"
// prefix; bare host = port 443).
func EgressFor(t *task.Task, extra ...string) *sandbox.Egress {
	list := agentAllowlist(t)
	if list == nil && len(extra) == 0 {
		return nil
	}
	return &sandbox.Egress{Allow: append(append([]string{}, list...), extra...)}
}

// agentAllowlist is what an agent's solve may reach through the egress
// proxy: the hosts of an allowlist policy (possibly none), or the egress
// list of a public policy (an agent never gets the open network, so
// public with a list means the list, the seed's uxlfoundation pattern);
// nil when the agent gets no proxy for the task (public without a list,
// no-network).
func agentAllowlist(t *task.Task) []string {
	switch n := t.AgentNetwork; {
	case n.Mode == task.NetworkAllowlist:
		return append([]string{}, n.AllowedHosts...)
	case n.Mode == task.NetworkPublic && len(n.AllowedHosts) > 0:
		return n.AllowedHosts
	}
	return nil
}

// egressFile is the cell's decision log.
const egressFile = "egress.jsonl"

// RecordEgress stops the egress proxy of sandbox h (when it has one),
// writes its decisions to the cell's egress.jsonl and records each as an
// EgressDecision event at the time the proxy made it; with a model
// gateway, it then writes the gateway's calls to model_calls.jsonl and
// records each as a priced ModelCall event (DESIGN §6.1). The launcher
// calls it when the solve has ended (the agent's processes are gone),
// before Finished: model calls are recorded at the end of the solve, not
// live. A line that does not decode is an error naming the file and the
// line (the file is kept as the proxy wrote it).
func RecordEgress(ctx context.Context, env Env, d sandbox.Driver, h *sandbox.Handle) error {
	if h == nil || h.State["proxy"] == "" {
		return nil
	}
	el, ok := d.(sandbox.EgressLogger)
	if !ok {
		return fmt.Errorf("the sandbox driver %T cannot read an egress proxy's log", d)
	}
	b, err := el.EgressLog(ctx, h)
	if err != nil {
		return fmt.Errorf("egress proxy log: %w", err)
	}
	dir := env.Dir()
	if err := os.WriteFile(dir.Path(egressFile), b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", egressFile, err)
	}
	n, err := eachRecord(b, dir.Path(egressFile), func(data events.EgressDecisionData, at time.Time) error {
		return env.Emit(ctx, events.EgressDecision, data, at)
	})
	if err != nil {
		return err
	}
	dir.Logf("egress: %d proxy records in %s", n, egressFile)
	return recordCalls(ctx, env, d, h)
}

// eachRecord calls fn for each JSON line of b (blank lines skipped) with
// the line decoded as T and its "time" field, and returns how many lines
// it handled. A line that does not decode is an error naming file and the
// line; fn's error is returned as it is.
func eachRecord[T any](b []byte, file string, fn func(T, time.Time) error) (int, error) {
	n := 0
	for i, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		var at struct {
			Time time.Time `json:"time"`
		}
		var data T
		if err := json.Unmarshal(l, &at); err != nil {
			return n, fmt.Errorf("%s line %d: %w", file, i+1, err)
		}
		if err := json.Unmarshal(l, &data); err != nil {
			return n, fmt.Errorf("%s line %d: %w", file, i+1, err)
		}
		if err := fn(data, at.Time); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
