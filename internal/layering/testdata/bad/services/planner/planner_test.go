package planner

import _ "example.com/bad/pkg/bus/bustest"
