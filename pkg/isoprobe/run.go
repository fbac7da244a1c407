package isoprobe

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Run probes every class as the calling process sees the system: cfg's
// file system root, the environment environ (KEY=VALUE pairs, as
// os.Environ returns them) and the process's network. It never fails: what
// it cannot decide is untested. The network, dns and docker_api attempts
// run while the file system is walked; each is bounded by
// cfg.TimeoutSec.
func Run(ctx context.Context, cfg Config, environ []string) Report {
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	timeout := 3 * time.Second
	if cfg.TimeoutSec > 0 {
		timeout = time.Duration(cfg.TimeoutSec * float64(time.Second))
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	rep := Report{Classes: map[string]Finding{}}
	var mu sync.Mutex
	set := func(c string, f Finding) {
		mu.Lock()
		rep.Classes[c] = f
		mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// network: the targets, the host's side of the sandbox's
		// networks (gateway ports), IPv6.
		var reached []string
		var gw, v6 Finding
		var inner sync.WaitGroup
		inner.Go(func() { gw, reached = gatewayCheck(ctx, cfg, cfg.Targets.GatewayPorts(), timeout) })
		inner.Go(func() { v6 = ipv6Check(cfg) })
		f := network(ctx, cfg.Targets, env, cfg.Allowlist, timeout)
		inner.Wait()
		set(Network, joinFindings(f, gw, v6))
		mu.Lock()
		rep.GatewayReached = reached
		mu.Unlock()
	})
	wg.Go(func() { set(DNS, dns(ctx, cfg.Targets.DNS, timeout)) })
	wg.Go(func() { set(DockerAPI, dockerAPI(ctx, cfg, env, timeout)) })

	var tf, tr Finding
	walked := walkFiles(cfg, &tf, &tr)
	forbiddenSkill(cfg, env, &tr)
	set(TaskFiles, tf)
	set(Treatment, tr)
	set(OperatorConfig, operatorConfig(cfg, env))
	set(CheckoutWalk, checkoutWalk(cfg))
	set(GitHistory, gitHistory(cfg))
	er := envClass(cfg, env)
	set(Env, er.f)
	wg.Wait()
	rep.EnvLeaked, rep.EnvUnexpected, rep.Walked = er.leaked, er.unexpected, walked
	return rep
}
