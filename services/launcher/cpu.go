package launcher

import "runtime"

// DefaultConcurrency is 2 × CPUs: the measured knee of container
// throughput on a 2-vCPU machine, where cells mostly wait on Docker.
func DefaultConcurrency() int { return 2 * runtime.NumCPU() }
