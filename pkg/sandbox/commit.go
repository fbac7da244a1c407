package sandbox

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Commit saves the sandbox's container filesystem as the local image ref
// (repository:tag), labelled proctor.managed, and returns the image id. It
// caches set-up work such as an agent's install step, which is run once per
// task image (DESIGN §5.1); the container keeps running.
func (d *Docker) Commit(ctx context.Context, h *Handle, ref string) (string, error) {
	cid, err := d.container(h)
	if err != nil {
		return "", err
	}
	resp, err := d.cli.ContainerCommit(ctx, cid, container.CommitOptions{
		Reference: ref,
		Comment:   "proctor: cached set-up",
		Pause:     true,
		Config:    &container.Config{Labels: map[string]string{LabelManaged: "1"}},
	})
	if err != nil {
		return "", fmt.Errorf("sandbox: commit %s as %s: %w", cid, ref, err)
	}
	return resp.ID, nil
}

// HasImage reports whether the local engine has the image ref.
func (d *Docker) HasImage(ctx context.Context, ref string) (bool, error) {
	_, err := d.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("sandbox: inspect %s: %w", ref, err)
}
