package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// resolvKeep is where MoveNetwork keeps the container's /etc/resolv.conf,
// root's only ("/" stays root's), while the container is on no network.
const resolvKeep = "/.proctor-resolv.conf"

// MoveNetwork puts the running sandbox h on network mode for its next
// phase, from whatever it is on now:
//
//   - sandbox.NetworkNone: no network at all. It leaves every network, and
//     its /etc/resolv.conf names no server (the file as it was is kept in
//     resolvKeep), so a name lookup fails at once with "temporary failure
//     in name resolution", as in a container started with NetworkNone. On
//     a per-cell internal network it was left unanswered until the
//     client gave up (the engine's resolver, which stays with the
//     container, forwards nothing for an internal network): 20 s per
//     lookup with glibc's defaults. A sandbox with compose services loses
//     them too.
//   - sandbox.NetworkBridge: as ConnectBridge.
//   - sandbox.NetworkInternal: back on the cell's own network, the one
//     Start made (as "main" beside compose services), the bridge left.
//
// Leaving NetworkNone puts /etc/resolv.conf back as it was. A container
// started with NetworkNone cannot join a network (the engine refuses).
// Errors are the engine's or the exec's that rewrites /etc/resolv.conf.
func (d *Driver) MoveNetwork(ctx context.Context, h *sandbox.Handle, mode string) error {
	cid, err := d.container(h)
	if err != nil {
		return err
	}
	ins, err := d.cli.ContainerInspect(ctx, cid)
	if err != nil {
		return d.execErr(err)
	}
	var joined map[string]*network.EndpointSettings
	if ins.NetworkSettings != nil {
		joined = ins.NetworkSettings.Networks
	}
	if ins.HostConfig != nil && ins.HostConfig.NetworkMode.IsNone() {
		if mode == sandbox.NetworkNone {
			return nil
		}
		return fmt.Errorf("%w: container %s was started with network none and cannot join %q", sandbox.ErrInvalidSpec, short(cid), mode)
	}
	switch mode {
	case sandbox.NetworkNone:
		for name, ep := range joined {
			id := name
			if ep != nil && ep.NetworkID != "" {
				id = ep.NetworkID
			}
			if err := d.cli.NetworkDisconnect(ctx, id, cid, true); err != nil && !cerrdefs.IsNotFound(err) {
				return fmt.Errorf("sandbox: docker: disconnect %s from %s: %w", short(cid), name, err)
			}
		}
		return d.resolv(ctx, h, `[ -e `+resolvKeep+` ] || { cat /etc/resolv.conf > `+resolvKeep+` && chmod 600 `+resolvKeep+`; } || exit 1
grep -v '^[[:space:]]*nameserver' `+resolvKeep+` > /etc/resolv.conf || true`)
	case sandbox.NetworkBridge:
		if err := d.ConnectBridge(ctx, h); err != nil {
			return err
		}
	case sandbox.NetworkInternal:
		nid := state(h, "network")
		if nid == "" {
			return fmt.Errorf("%w: container %s has no cell network to go back to", sandbox.ErrInvalidSpec, short(cid))
		}
		on := false
		for _, ep := range joined {
			on = on || (ep != nil && ep.NetworkID == nid)
		}
		if !on {
			var es *network.EndpointSettings
			if state(h, "services") != "" {
				es = &network.EndpointSettings{Aliases: []string{"main"}}
			}
			if err := d.cli.NetworkConnect(ctx, nid, cid, es); err != nil {
				return fmt.Errorf("sandbox: docker: connect %s to its cell network: %w", short(cid), err)
			}
		}
		if _, ok := joined[sandbox.NetworkBridge]; ok {
			if err := d.cli.NetworkDisconnect(ctx, sandbox.NetworkBridge, cid, true); err != nil && !cerrdefs.IsNotFound(err) {
				return fmt.Errorf("sandbox: docker: disconnect %s from bridge: %w", short(cid), err)
			}
		}
	default:
		return fmt.Errorf("%w: network %q (want %q, %q or %q)", sandbox.ErrInvalidSpec, mode, sandbox.NetworkNone, sandbox.NetworkBridge, sandbox.NetworkInternal)
	}
	return d.resolv(ctx, h, `[ -e `+resolvKeep+` ] || exit 0
cat `+resolvKeep+` > /etc/resolv.conf && rm -f `+resolvKeep)
}

// resolv runs script as root to rewrite /etc/resolv.conf (a file the
// engine mounts: written in place, never replaced).
func (d *Driver) resolv(ctx context.Context, h *sandbox.Handle, script string) error {
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{Cmd: []string{"sh", "-c", script}, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	if err != nil {
		return fmt.Errorf("sandbox: docker: rewrite /etc/resolv.conf: %w", err)
	}
	return nil
}
