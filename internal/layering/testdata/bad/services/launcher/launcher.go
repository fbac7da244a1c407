package launcher

import (
	_ "example.com/bad/internal/cli"
	_ "example.com/bad/pkg/events"
	_ "example.com/bad/services/launcher/inner"
	_ "example.com/bad/services/verifier"
)
