package cli

import _ "example.com/bad/services/launcher"
