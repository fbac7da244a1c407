package cli

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/docker"
)

// The sandbox driver registry: the drivers `--sandbox NAME` selects for
// the cells' sandboxes (tasks run, runs resume, serve, gc). This is the
// only file of the command line that names a driver package
// (internal/layering holds it to that); everything else holds a
// sandbox.Driver and finds its abilities by type assertion.

// defaultSandbox is the driver used when --sandbox is not given.
const defaultSandbox = "docker"

// sandboxConfig is what a driver is opened with.
type sandboxConfig struct {
	// getenv reads the driver's variables (the PROCTOR_* of proxy.go).
	getenv   func(string) string
	logger   *slog.Logger
	imageMap *sandbox.ImageMap
	// defaults are the limits of a sandbox whose task declares none.
	defaults sandbox.Limits
}

// sandboxDriver is one row of the registry.
type sandboxDriver struct {
	name, about string
	// open returns the driver for cfg and proctor's environment (the
	// PROCTOR_* variables of proxy.go); it contacts nothing.
	open func(cfg sandboxConfig) (sandbox.Driver, error)
	// ready reports, with the fix, why the driver cannot serve now (its
	// engine does not answer); nil when it can.
	ready func(ctx context.Context, d sandbox.Driver) error
	// pool is the address pool of the driver's internal networks, which
	// `proctor firewall` covers.
	pool netip.Prefix
}

// sandboxDrivers are the cell sandbox drivers. The process driver is not
// one: it runs the host commands of command: and delegated arms.
var sandboxDrivers = []sandboxDriver{{
	name:  "docker",
	about: "a Docker container per cell, on the engine DOCKER_HOST names",
	open: func(cfg sandboxConfig) (sandbox.Driver, error) {
		getenv := cfg.getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		slack, err := engineSlack(getenv)
		if err != nil {
			return nil, err
		}
		up, err := upstreamFromEnv(getenv, func(w string) { cfg.logger.Warn(w) })
		if err != nil {
			return nil, err
		}
		return docker.New(docker.Options{Logger: cfg.logger, ImageMap: cfg.imageMap, Defaults: cfg.defaults,
			ProxyBinary: getenv(EnvProxyBinary), EgressNetwork: getenv(EnvEgressNetwork),
			CgroupRoot: getenv(EnvCgroupRoot), CopyAPIOnly: getenv(EnvCopyAPIOnly) == "1",
			EngineSlack: slack, UpstreamProxy: up.proxy, UpstreamCA: up.ca, BuildProxy: up.build})
	},
	ready: func(ctx context.Context, d sandbox.Driver) error {
		if _, err := d.(*docker.Driver).Client().Ping(ctx); err != nil {
			return fmt.Errorf("no Docker engine answers (%v); run `make setup` or start dockerd", err)
		}
		return nil
	},
	pool: docker.InternalPool,
}}

// sandboxHelp is the help of a --sandbox flag that selects the cells'
// driver.
func sandboxHelp() string {
	var names []string
	for _, s := range sandboxDrivers {
		names = append(names, s.name+" ("+s.about+")")
	}
	return "the driver of the cells' sandboxes: " + strings.Join(names, ", ")
}

// defaultPool is the address pool of the default driver's internal
// networks.
func defaultPool() netip.Prefix {
	for _, s := range sandboxDrivers {
		if s.name == defaultSandbox {
			return s.pool
		}
	}
	return netip.Prefix{}
}

// sandboxNames are the names of the registry's drivers.
func sandboxNames() []string {
	var names []string
	for _, s := range sandboxDrivers {
		names = append(names, s.name)
	}
	return names
}

// lookupSandbox returns the registry row of name ("" the default), from
// g.sandboxes when a test set it.
func (g *globals) lookupSandbox(name string) (sandboxDriver, error) {
	if name == "" {
		name = defaultSandbox
	}
	rows := sandboxDrivers
	if g.sandboxes != nil {
		rows = g.sandboxes
	}
	var names []string
	for _, s := range rows {
		if s.name == name {
			return s, nil
		}
		names = append(names, s.name)
	}
	return sandboxDriver{}, usageError{fmt.Errorf("--sandbox %q: no such sandbox driver (%s)", name, strings.Join(names, ", "))}
}

// checkSandbox opens the driver name selects and refuses, before anything
// starts, a run whose harnesses need an ability it does not declare
// (harness.CheckAbilities), naming each.
func (g *globals) checkSandbox(name string, harnesses []string) error {
	sd, err := g.lookupSandbox(name)
	if err != nil {
		return err
	}
	// Only its abilities are asked for: warnings come when it is opened to
	// serve.
	d, err := sd.open(sandboxConfig{getenv: g.getenv, logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := harness.CheckAbilities(sd.name, sandbox.AbilitiesOf(d), harnesses); err != nil {
		return usageError{fmt.Errorf("--sandbox %s: %w", sd.name, err)}
	}
	return nil
}

// engineSlack reads PROCTOR_ENGINE_SLACK through getenv (seconds; unset:
// 0, the driver's default).
func engineSlack(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv(EnvEngineSlack))
	if v == "" {
		return 0, nil
	}
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil || !(sec > 0) || math.IsInf(sec, 0) {
		return 0, usageError{fmt.Errorf("%s=%q: want a number of seconds > 0", EnvEngineSlack, v)}
	}
	return time.Duration(sec * float64(time.Second)), nil
}
