package harness

import (
	"fmt"
	"slices"
	"strings"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// VerifierNeeds are the abilities of the container driver the verifier
// phase of a cell the task's verifier scores may use: Freezer and
// FileCopier for the reward (frozen before it is read, read from the copy
// stream), NetworkMover for the verifier's network (the bridge, or none,
// after the solve's) and a multi-step task's next step back on the
// solve's, ImageBuilder for a separate verifier's image, and Thawer for
// that next step. OOMCounter is used when there, not needed; BridgeJoiner
// is the fallback of a driver without NetworkMover for a public verifier
// only.
var VerifierNeeds = []sandbox.Ability{
	sandbox.AbilityFreezer, sandbox.AbilityFileCopier, sandbox.AbilityNetworkMover,
	sandbox.AbilityImageBuilder, sandbox.AbilityThawer,
}

// Each arm's Needs: what its Prepare and Solve use of Env.Driver, what
// the launcher uses for it (EgressLogger when its sandbox has an egress
// proxy), and VerifierNeeds when the task's verifier scores it. An arm on
// the host driver (Env.Host) needs nothing of the container driver.

func (oracleArm) Needs() []sandbox.Ability {
	return append([]sandbox.Ability{sandbox.AbilityImageBuilder, sandbox.AbilityEgressLogger}, VerifierNeeds...)
}

// An agent's operations file is read straight from the sandbox
// (FileReader: readAgentOperations) and its metrics.json from a copy of
// /agent-output (FileCopier).
func (agentArm) Needs() []sandbox.Ability {
	return append([]sandbox.Ability{sandbox.AbilityImageBuilder, sandbox.AbilityDerivedImager,
		sandbox.AbilityProcessKiller, sandbox.AbilityFileCopier, sandbox.AbilityFileReader, sandbox.AbilityTreeCopier, sandbox.AbilityEgressLogger}, VerifierNeeds...)
}

// docker-claude's model calls are read from the gateway (CallLogger)
// unless the run has --no-intercept.
func (a claudeArm) Needs() []sandbox.Ability {
	if a.onHost() {
		// The CLI runs on the host: the container's tree is copied out and
		// back (TreeCopier), nothing is derived nor run in it as the agent.
		return append([]sandbox.Ability{sandbox.AbilityImageBuilder, sandbox.AbilityTreeCopier, sandbox.AbilityEgressLogger,
			sandbox.AbilityCallLogger}, VerifierNeeds...)
	}
	return append([]sandbox.Ability{sandbox.AbilityImageBuilder, sandbox.AbilityDerivedImager,
		sandbox.AbilityProcessKiller, sandbox.AbilityFileReader, sandbox.AbilityTreeCopier, sandbox.AbilityEgressLogger,
		sandbox.AbilityCallLogger}, VerifierNeeds...)
}

// The probe scores itself: no verifier phase. Without ImageEnver its env
// class would be untested, which fails the probe. It runs through
// RunUntrusted as an agent does, so its epilogue kills what the probe
// left (ProcessKiller). Its sandbox is docker-claude's, model gateway
// included, whose calls the launcher reads (CallLogger).
func (a probeArm) Needs() []sandbox.Ability {
	if a.onHost() {
		// On the host: the container's tree copied out and back.
		return []sandbox.Ability{sandbox.AbilityImageBuilder, sandbox.AbilityTreeCopier, sandbox.AbilityEgressLogger, sandbox.AbilityCallLogger}
	}
	return []sandbox.Ability{sandbox.AbilityImageBuilder, sandbox.AbilityImageEnver, sandbox.AbilityEgressLogger,
		sandbox.AbilityProcessKiller, sandbox.AbilityCallLogger}
}

func (commandArm) Needs() []sandbox.Ability   { return nil }
func (harborArm) Needs() []sandbox.Ability    { return nil }
func (benchflowArm) Needs() []sandbox.Ability { return nil }

// CheckAbilities returns an error naming each ability that the arms of
// harnesses need (Arm.Needs) and has lacks, with the harnesses that need
// it, or nil when has covers them all. driver names the sandbox driver in
// the message. A harness that does not parse is left to the checks that
// report it.
func CheckAbilities(driver string, has []sandbox.Ability, harnesses []string) error {
	var order []sandbox.Ability
	by := map[sandbox.Ability][]string{}
	for _, name := range harnesses {
		a, err := Lookup(name)
		if err != nil {
			continue
		}
		for _, m := range sandbox.Missing(has, a.Needs()) {
			if by[m] == nil {
				order = append(order, m)
			}
			if n := a.Ref().Name; !slices.Contains(by[m], n) {
				by[m] = append(by[m], n)
			}
		}
	}
	if len(order) == 0 {
		return nil
	}
	var parts []string
	for _, m := range order {
		parts = append(parts, fmt.Sprintf("%s (needed by %s)", m, strings.Join(by[m], ", ")))
	}
	return fmt.Errorf("the sandbox driver %q lacks %s: no cell of these harnesses could run on it", driver, strings.Join(parts, ", "))
}
