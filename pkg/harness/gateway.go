package harness

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// runCAs holds each run's CA, made on first use (RunCA).
var runCAs struct {
	mu  sync.Mutex
	cas map[string]*tlsca.CA
}

// RunCA returns the CA of run runID (DESIGN §6.1), made on the first call
// in this process. The CA lives in this process's memory only: its key
// reaches the egress proxies' sidecars (in their 0600 config file, which
// each proxy removes once read) and nothing else, and no file of it is
// left on the host to remove. ForgetRunCA drops it when the run ends; a
// restarted or another launcher makes its own for the same run.
func RunCA(runID string) (*tlsca.CA, error) {
	runCAs.mu.Lock()
	defer runCAs.mu.Unlock()
	if ca := runCAs.cas[runID]; ca != nil {
		return ca, nil
	}
	ca, err := tlsca.New("proctor run " + runID)
	if err != nil {
		return nil, err
	}
	if runCAs.cas == nil {
		runCAs.cas = map[string]*tlsca.CA{}
	}
	runCAs.cas[runID] = ca
	return ca, nil
}

// ForgetRunCA drops the CA of run runID; the next RunCA makes a new one.
func ForgetRunCA(runID string) {
	runCAs.mu.Lock()
	defer runCAs.mu.Unlock()
	delete(runCAs.cas, runID)
}

// ModelGateway is the model gateway of an in-container arm's sandbox
// (DESIGN §6.1), for the providers named (pkg/providers): each provider's
// hosts (its API host, and its base URL's host read through getenv,
// "private:" prefixed when PROCTOR_PROVIDER_PRIVATE=1), its credentials
// read through getenv with a fresh placeholder each, and the run's CA.
// An arm puts it on its sandbox with GatewayEgress and gives its agent
// GatewayEnv instead of the credentials; its Exec adds sandbox.CAEnv.
// An unknown provider or a bad variable is an error naming it.
func ModelGateway(env Env, getenv func(string) string, names ...string) (*sandbox.Gateway, error) {
	ca, err := RunCA(env.RunID())
	if err != nil {
		return nil, fmt.Errorf("the run's CA: %w", err)
	}
	g := &sandbox.Gateway{CA: ca}
	private := env.Getenv(ProviderPrivateEnv) == "1"
	for _, n := range names {
		p, ok := providers.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("provider %q is not one the gateway knows", n)
		}
		r, err := providers.Resolve(p, getenv, private)
		if err != nil {
			return nil, err
		}
		g.Routes = append(g.Routes, r)
	}
	return g, nil
}

// GatewayEgress returns the egress proxy of an arm's sandbox for task t
// with gateway g: EgressFor(t, the routes' hosts..., extra...) with g
// set.
func GatewayEgress(env Env, g *sandbox.Gateway, extra ...string) *sandbox.Egress {
	var hosts []string
	for _, r := range g.Routes {
		hosts = append(hosts, r.Hosts...)
	}
	e := EgressFor(env.Task(), append(hosts, extra...)...)
	e.Gateway = g
	return e
}

// GatewayEnv returns env (an agent's provider variables) with each
// credential variable of g's routes set to its placeholder and every
// route's header variable (ANTHROPIC_CUSTOM_HEADERS) removed: the proxy
// adds those headers itself.
func GatewayEnv(g *sandbox.Gateway, env map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, r := range g.Routes {
		p, _ := providers.Lookup(r.Provider)
		for _, k := range p.CredentialEnv {
			delete(out, k)
		}
		for _, k := range []string{p.HeaderEnv, r.HeaderEnv} {
			if k != "" {
				delete(out, k)
			}
		}
		maps.Copy(out, r.AgentEnv())
	}
	return out
}

// GatewaySecrets returns the real values of g's routes, name → value, for
// a Redactor.
func GatewaySecrets(g *sandbox.Gateway) map[string]string {
	out := map[string]string{}
	if g == nil {
		return out
	}
	for _, r := range g.Routes {
		for _, c := range r.Credentials {
			out[c.Env] = c.Value
		}
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			out[r.Provider+" header "+k] = r.Headers[k]
		}
	}
	return out
}

// callsFile is the cell's model call log.
const callsFile = "model_calls.jsonl"

// recordCalls reads the model calls of sandbox h's gateway, writes them
// to the cell's model_calls.jsonl and records each as a ModelCall event
// at the time the proxy made it, priced from the pinned price table
// (providers.Prices). A line that does not decode is an error naming the
// file and the line.
func recordCalls(ctx context.Context, env Env, d sandbox.Driver, h *sandbox.Handle) error {
	if h.State["gateway_ca"] == "" {
		return nil
	}
	cl, ok := d.(sandbox.CallLogger)
	if !ok {
		return fmt.Errorf("the sandbox driver %T cannot read a gateway's model calls", d)
	}
	b, err := cl.CallLog(ctx, h)
	if err != nil {
		return fmt.Errorf("model call log: %w", err)
	}
	dir := env.Dir()
	if err := os.WriteFile(dir.Path(callsFile), b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", callsFile, err)
	}
	prices := providers.Prices()
	n, err := eachRecord(b, dir.Path(callsFile), func(data events.ModelCallData, at time.Time) error {
		Price(prices, &data)
		return env.Emit(ctx, events.ModelCall, data, at)
	})
	if err != nil {
		return err
	}
	dir.Logf("gateway: %d model calls in %s", n, callsFile)
	return nil
}

// Price sets d's cost from table t: CostUSD and the table's date, or a
// nil cost and CostNote saying why (no usage reported, no model, a model
// not in the table).
func Price(t *providers.PriceTable, d *events.ModelCallData) {
	d.PriceTable = t.Date
	if d.InputTokens == nil && d.OutputTokens == nil && d.CacheReadTokens == nil && d.CacheWriteTokens == nil {
		d.CostUSD, d.CostNote = nil, "no usage in the response"
		return
	}
	n := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	d.CostUSD, d.CostNote = t.Cost(d.Model, providers.Tokens{
		Input: n(d.InputTokens), Output: n(d.OutputTokens), CacheRead: n(d.CacheReadTokens), CacheWrite: n(d.CacheWriteTokens),
	})
}
