package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// limitFlags are the sandbox limits a launcher applies when a task
// declares none (docs/decisions/2026-12-01-container-limits.md).
type limitFlags struct {
	memoryMB int64
	cpus     float64
	pids     int64
}

// add registers --default-memory-mb, --default-cpus and --pids-limit.
func (l *limitFlags) add(fl *pflag.FlagSet) {
	fl.Int64Var(&l.memoryMB, "default-memory-mb", sandbox.DefaultMemoryMB, "memory limit in MiB of a sandbox whose task declares no memory_mb (-1: no limit)")
	fl.Float64Var(&l.cpus, "default-cpus", 0, "CPU limit of a sandbox whose task declares no cpus (0: no limit)")
	fl.Int64Var(&l.pids, "pids-limit", sandbox.DefaultPidsLimit, "most processes and threads at once in every sandbox (-1: no limit)")
}

// limits returns the driver defaults, or a usage error naming the flag.
func (l *limitFlags) limits() (sandbox.Limits, error) {
	switch {
	case l.memoryMB == 0 || l.memoryMB < -1:
		return sandbox.Limits{}, usageError{fmt.Errorf("--default-memory-mb %d: want a number of MiB, or -1 for no limit", l.memoryMB)}
	case l.cpus < 0:
		return sandbox.Limits{}, usageError{fmt.Errorf("--default-cpus %g: want 0 (no limit) or more", l.cpus)}
	case l.pids == 0 || l.pids < -1:
		return sandbox.Limits{}, usageError{fmt.Errorf("--pids-limit %d: want a number of processes, or -1 for no limit", l.pids)}
	}
	return sandbox.Limits{MemoryMB: l.memoryMB, CPUs: l.cpus, PidsLimit: l.pids}, nil
}
