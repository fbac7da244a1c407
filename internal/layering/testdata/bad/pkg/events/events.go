package events

import (
	_ "example.com/bad/internal/testutil"
	_ "example.com/bad/services/launcher"
	_ "fmt"
)
