package process

import (
	"testing"

	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T) (sandbox.Driver, sandbox.Spec) {
		return &Driver{BaseDir: t.TempDir()}, sandbox.Spec{RunID: "conf-run", CellID: "conf/cell"}
	})
}
