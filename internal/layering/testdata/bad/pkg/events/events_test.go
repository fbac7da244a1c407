package events

import (
	_ "example.com/bad/internal/atomicfile"
	_ "example.com/bad/internal/testutil"
)
