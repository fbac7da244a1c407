// Command scale is the scale rig (`make scale`; deploy/scale/README.md):
// `scale rig [flags]` brings up a 3-node JetStream cluster, the planner
// and aggregator, simulated worker nodes and runs at a configured rate,
// and prints what the control plane did. The rig starts its own
// processes as this binary's other roles (worker, proctor).
package main

import (
	"os"

	"github.com/proctor-eval/proctor/internal/scalerig"
)

func main() { os.Exit(scalerig.Main(os.Args[1:], os.Stdout, os.Stderr)) }
