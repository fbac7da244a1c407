package verifier

import _ "example.com/bad/internal/testutil"
