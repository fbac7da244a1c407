package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// LabelService names the compose service of a sidecar container (beside
// proctor.role=service and the run, cell and managed labels).
const LabelService = "proctor.service"

// checkServices validates spec.Services and spec.DependsOn: names unique
// and not "main", an image each, every dependency a service, a known
// condition, no cycle.
func checkServices(spec sandbox.Spec, mode string) error {
	if len(spec.Services) == 0 {
		if len(spec.DependsOn) > 0 {
			return fmt.Errorf("%w: depends_on without services", sandbox.ErrInvalidSpec)
		}
		return nil
	}
	if mode != sandbox.NetworkInternal && mode != sandbox.NetworkBridge {
		return fmt.Errorf("%w: compose services need network %q or %q, not %q (they must see each other)", sandbox.ErrInvalidSpec, sandbox.NetworkInternal, sandbox.NetworkBridge, mode)
	}
	byName := map[string]sandbox.Service{}
	for _, s := range spec.Services {
		if s.Name == "" || s.Name == "main" || s.Image == "" {
			return fmt.Errorf("%w: service %q: a name other than main and an image are needed", sandbox.ErrInvalidSpec, s.Name)
		}
		if _, dup := byName[s.Name]; dup {
			return fmt.Errorf("%w: service %q twice", sandbox.ErrInvalidSpec, s.Name)
		}
		byName[s.Name] = s
	}
	checkDeps := func(who string, deps map[string]string) error {
		for dep, cond := range deps {
			if _, ok := byName[dep]; !ok {
				return fmt.Errorf("%w: %s depends on %q, which is not a service", sandbox.ErrInvalidSpec, who, dep)
			}
			switch cond {
			case sandbox.ConditionStarted, sandbox.ConditionHealthy, sandbox.ConditionCompleted:
			default:
				return fmt.Errorf("%w: %s depends on %s with condition %q", sandbox.ErrInvalidSpec, who, dep, cond)
			}
		}
		return nil
	}
	if err := checkDeps("main", spec.DependsOn); err != nil {
		return err
	}
	for _, s := range spec.Services {
		if err := checkDeps(s.Name, s.DependsOn); err != nil {
			return err
		}
	}
	if _, err := serviceOrder(spec.Services); err != nil {
		return err
	}
	return nil
}

// serviceOrder returns the services in an order where each comes after
// its dependencies (ties by name), or an error on a cycle.
func serviceOrder(svcs []sandbox.Service) ([]sandbox.Service, error) {
	byName := map[string]sandbox.Service{}
	for _, s := range svcs {
		byName[s.Name] = s
	}
	var out []sandbox.Service
	state := map[string]int{}
	var visit func(string) error
	visit = func(n string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("%w: depends_on cycle through %s", sandbox.ErrInvalidSpec, n)
		case 2:
			return nil
		}
		state[n] = 1
		for _, d := range slices.Sorted(maps.Keys(byName[n].DependsOn)) {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, byName[n])
		return nil
	}
	for _, n := range slices.Sorted(maps.Keys(byName)) {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// createCellNetwork creates a per-cell bridge network with a way out (for
// the services of a cell whose policy is public): the engine picks its
// subnet from its own pools, outside InternalPool, which the host
// firewall closes.
func (d *Driver) createCellNetwork(ctx context.Context, name string, lbl map[string]string) (string, error) {
	resp, err := d.cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge", Labels: lbl})
	if err != nil {
		return "", fmt.Errorf("sandbox: docker: create network %s: %w", name, err)
	}
	return resp.ID, nil
}

// startServices creates and starts spec's services on the network netName,
// each after its dependencies' conditions hold, with its name as its
// alias, the sandbox's labels plus proctor.role=service and
// proctor.service=NAME, no-new-privileges, the driver's default limits
// (pids always; memory and CPUs unless the service sets its own), and
// with an egress proxy the proxy variables. Their ids are recorded in
// h.State["services"] (comma-separated) as they are created, so Destroy
// removes them whatever happens next.
func (d *Driver) startServices(ctx context.Context, h *sandbox.Handle, spec sandbox.Spec, netName string, lbl map[string]string) error {
	order, err := serviceOrder(spec.Services)
	if err != nil {
		return err
	}
	ids := map[string]string{}
	var created []string
	for _, s := range order {
		if err := d.waitDeps(ctx, s.Name, s.DependsOn, ids); err != nil {
			return err
		}
		env := maps.Clone(s.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, sandbox.ProxyEnv(h))
		clbl := maps.Clone(lbl)
		clbl[LabelRole] = "service"
		clbl[LabelService] = s.Name
		cfg := &container.Config{
			Image: s.Image, Env: envList(env), WorkingDir: s.Workdir, User: s.User, Labels: clbl,
			Entrypoint: s.Entrypoint, Cmd: s.Cmd,
		}
		if hc := s.Healthcheck; hc != nil {
			cfg.Healthcheck = &container.HealthConfig{Test: hc.Test, Interval: hc.Interval, Timeout: hc.Timeout, StartPeriod: hc.StartPeriod, Retries: hc.Retries}
		}
		lim := d.defaults
		lim.CPUs, lim.MemoryMB = max(s.CPUs, 0), s.MemoryMB
		if lim.CPUs == 0 {
			lim.CPUs = d.defaults.CPUs
		}
		if lim.MemoryMB <= 0 {
			lim.MemoryMB = d.defaults.MemoryMB
		}
		hc := hostConfig(netName, lim)
		nc := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {Aliases: []string{s.Name}}}}
		c, err := d.cli.ContainerCreate(ctx, cfg, hc, nc, nil, "")
		if err != nil {
			return fmt.Errorf("sandbox: docker: create service %s from %s: %w", s.Name, s.Image, err)
		}
		ids[s.Name] = c.ID
		created = append(created, c.ID)
		h.State["services"] = strings.Join(created, ",")
		if err := d.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			return fmt.Errorf("sandbox: docker: start service %s: %w", s.Name, err)
		}
		d.log.Debug("service started", "service", s.Name, "container", short(c.ID), "image", s.Image)
	}
	return d.waitDeps(ctx, "main", spec.DependsOn, ids)
}

// waitDeps waits until every dependency of who meets its condition
// (polling the engine, up to ServiceWait each): started (running, or
// exited), healthy (the engine's health status "healthy"; "unhealthy" or
// an exit fails at once) or completed successfully (exited 0).
func (d *Driver) waitDeps(ctx context.Context, who string, deps map[string]string, ids map[string]string) error {
	for _, dep := range slices.Sorted(maps.Keys(deps)) {
		if err := d.waitCondition(ctx, who, dep, deps[dep], ids[dep]); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) waitCondition(ctx context.Context, who, dep, cond, cid string) error {
	wctx, cancel := context.WithTimeout(ctx, sandbox.ServiceWait)
	defer cancel()
	interval := 20 * time.Millisecond
	for {
		ins, err := d.cli.ContainerInspect(wctx, cid)
		if err != nil {
			return fmt.Errorf("sandbox: docker: %s waits for service %s: %w", who, dep, err)
		}
		st := ins.State
		exited := st != nil && !st.Running && st.Status != "created"
		switch cond {
		case sandbox.ConditionStarted:
			if st != nil && (st.Running || exited) {
				return nil
			}
		case sandbox.ConditionCompleted:
			if exited {
				if st.ExitCode == 0 {
					return nil
				}
				return fmt.Errorf("sandbox: docker: service %s exited %d; %s needs it to complete successfully: %s", dep, st.ExitCode, who, d.tail(wctx, cid))
			}
		case sandbox.ConditionHealthy:
			if exited {
				return fmt.Errorf("sandbox: docker: service %s exited %d before it was healthy (%s needs it healthy): %s", dep, st.ExitCode, who, d.tail(wctx, cid))
			}
			if st != nil && st.Health != nil {
				switch st.Health.Status {
				case "healthy":
					return nil
				case "unhealthy":
					last := ""
					if n := len(st.Health.Log); n > 0 {
						last = strings.TrimSpace(st.Health.Log[n-1].Output)
					}
					return fmt.Errorf("sandbox: docker: service %s is unhealthy (%s needs it healthy); last check: %s", dep, who, last)
				}
			}
		}
		if wctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sandbox: docker: service %s did not reach %s within %s (%s waits for it)", dep, cond, sandbox.ServiceWait, who)
		}
		sleepCtx(wctx, interval)
		interval = min(interval*2, 500*time.Millisecond)
	}
}

// tail is the end of a container's output, for an error message.
func (d *Driver) tail(ctx context.Context, cid string) string {
	out, _ := d.containerOutput(ctx, cid)
	out = strings.TrimSpace(out)
	if len(out) > 500 {
		out = "..." + out[len(out)-500:]
	}
	return out
}
