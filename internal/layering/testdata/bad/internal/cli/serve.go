package cli

import _ "example.com/bad/pkg/sandbox/docker"
