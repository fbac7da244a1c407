package task

import (
	_ "example.com/bad/pkg/dockerfile"
	_ "example.com/bad/pkg/harness"
	_ "example.com/bad/pkg/sandbox"
)
