package sandbox

import "context"

// Process is the Driver that runs commands on the host, each sandbox a
// fresh temp work tree (DESIGN §4).
type Process struct {
	// BaseDir is where temp work trees are made; "" means os.TempDir().
	BaseDir string
}

var _ Driver = (*Process)(nil)

// Start implements Driver.
func (p *Process) Start(ctx context.Context, spec Spec) (*Handle, error) {
	return nil, errUnimplemented
}

// Exec implements Driver.
func (p *Process) Exec(ctx context.Context, h *Handle, spec ExecSpec) (ExecResult, error) {
	return ExecResult{}, errUnimplemented
}

// CopyIn implements Driver.
func (p *Process) CopyIn(ctx context.Context, h *Handle, hostPath, sandboxDir string) error {
	return errUnimplemented
}

// CopyOut implements Driver.
func (p *Process) CopyOut(ctx context.Context, h *Handle, sandboxPath, hostDir string) error {
	return errUnimplemented
}

// Destroy implements Driver.
func (p *Process) Destroy(ctx context.Context, h *Handle) error {
	return errUnimplemented
}
