package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// EnsureDerived returns once the local image ref exists, making it when it
// does not: a sandbox from spec (whose Image is the base) is started, setup
// runs in it, and its filesystem is committed as ref, then the sandbox is
// destroyed. Concurrent calls for one ref run setup once (the others wait
// and find the image), so set-up work such as an agent's install step runs
// once per base image (DESIGN §5.1). made reports whether this call made
// the image; a setup error is returned as it is and nothing is committed.
func (d *Driver) EnsureDerived(ctx context.Context, ref string, spec sandbox.Spec, setup func(context.Context, *sandbox.Handle) error) (made bool, err error) {
	unlock := d.builds.lock(ref)
	defer unlock()
	if ok, err := d.HasImage(ctx, ref); err != nil || ok {
		return false, err
	}
	h, err := d.Start(ctx, spec)
	if err != nil {
		return false, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.DestroyTimeout)
		defer cancel()
		if derr := d.Destroy(dctx, h); derr != nil && err == nil {
			err = derr
		}
	}()
	if err := setup(ctx, h); err != nil {
		return false, err
	}
	if _, err := d.Commit(ctx, h, ref); err != nil {
		return false, err
	}
	return true, nil
}

// Commit saves the sandbox's container filesystem as the local image ref
// (repository:tag), labelled proctor.managed, and returns the image id. It
// caches set-up work such as an agent's install step, which is run once per
// task image (DESIGN §5.1); the container keeps running.
func (d *Driver) Commit(ctx context.Context, h *sandbox.Handle, ref string) (string, error) {
	cid, err := d.container(h)
	if err != nil {
		return "", err
	}
	resp, err := d.cli.ContainerCommit(ctx, cid, container.CommitOptions{
		Reference: ref,
		Comment:   "proctor: cached set-up",
		Pause:     true,
		Config:    &container.Config{Labels: map[string]string{sandbox.LabelManaged: "1"}},
	})
	if err != nil {
		return "", fmt.Errorf("sandbox: commit %s as %s: %w", cid, ref, err)
	}
	return resp.ID, nil
}

// HasImage reports whether the local engine has the image ref.
func (d *Driver) HasImage(ctx context.Context, ref string) (bool, error) {
	_, err := d.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("sandbox: inspect %s: %w", ref, err)
}
