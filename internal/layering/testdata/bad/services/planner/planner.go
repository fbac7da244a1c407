package planner

import (
	_ "example.com/bad/pkg/bus/bustest"
	_ "example.com/bad/pkg/sandbox/docker"
	_ "example.com/bad/pkg/task"
)
