package docker

import (
	_ "example.com/bad/pkg/events"
	_ "example.com/bad/pkg/sandbox"
)
