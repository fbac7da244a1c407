package harness

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// PrepExitCode is the exit status of a PlaceAndRun command whose
// preparation (removing, creating, copying) failed before the script ran.
const PrepExitCode = 97

// StagePath returns a fresh path under / to copy a directory to before
// PlaceAndRun puts it in place; random, so nothing a solver left can be
// mistaken for it.
func StagePath(name string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "/.proctor-stage-" + hex.EncodeToString(b) + "/" + name
}

// PlaceAndRun returns an argv for one exec that removes the paths in
// clean, creates the directories in mkdirs, copies the staged directory
// stage to each of dsts with `cp -a`, removes the stage, and then runs run
// in its place (exec). It saves the separate preparation exec and copies a
// cell would otherwise make. When a preparation step fails, the command
// prints what failed on stderr and exits PrepExitCode without running run.
// It needs sh and cp in the image (coreutils or busybox).
func PlaceAndRun(stage string, dsts, clean, mkdirs, run []string) []string {
	q := func(ps []string) string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = shq(p)
		}
		return strings.Join(out, " ")
	}
	var b strings.Builder
	fail := func(what string) string {
		return " || { echo " + shq("proctor: "+what+" failed") + " >&2; exit 97; }\n"
	}
	if len(clean) > 0 {
		b.WriteString("rm -rf " + q(clean) + fail("removing "+strings.Join(clean, " ")))
	}
	if len(mkdirs) > 0 {
		b.WriteString("mkdir -p " + q(mkdirs) + fail("creating "+strings.Join(mkdirs, " ")))
	}
	for _, d := range dsts {
		b.WriteString("cp -a " + shq(stage) + " " + shq(d) + fail("copying to "+d))
	}
	b.WriteString("rm -rf " + shq(parentOf(stage)) + "\n")
	b.WriteString("exec " + q(run) + "\n")
	return []string{"sh", "-c", b.String()}
}

func parentOf(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return p
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
