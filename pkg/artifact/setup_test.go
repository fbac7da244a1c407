package artifact

import "github.com/proctor-eval/proctor/pkg/harness"

// The options the projection builds with: the harness arms say which
// harnesses are setup checks (the oracle, probes), never compared.
var (
	testCompare = CompareOptions{SetupCheck: harness.IsSetupCheck}
	testBuild   = BuildOptions{Compare: testCompare}
)
