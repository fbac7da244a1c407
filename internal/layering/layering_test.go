package layering

import (
	"os"
	"reflect"
	"testing"
)

// TestModuleKeepsTheLayering fails when any file of this module crosses the
// layering: add `import _ ".../services/launcher"` to a file of pkg/ and it
// names that file.
func TestModuleKeepsTheLayering(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, module, err := ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := Check(root, module)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// TestCheckFindsBadImports runs the checker on a fixture module holding one
// import of each forbidden kind beside allowed ones: across services, from
// pkg/ to a service or internal/, upward or sideways between layers, from a
// driver to anything but the contract, the Docker driver outside the CLI's
// driver registry (internal/cli/sandboxes.go), a test kit outside a test,
// a package without a layer.
func TestCheckFindsBadImports(t *testing.T) {
	vs, err := Check("testdata/bad", "example.com/bad")
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]string
	for _, v := range vs {
		got = append(got, [2]string{v.File, v.Import})
	}
	want := [][2]string{
		{"internal/cli/serve.go", "pkg/sandbox/docker"},
		{"pkg/events/events.go", "internal/testutil"},
		{"pkg/events/events.go", "services/launcher"},
		{"pkg/events/events_test.go", "internal/atomicfile"},
		{"pkg/newthing/newthing.go", "pkg/events"},
		{"pkg/sandbox/docker/docker.go", "pkg/events"},
		{"pkg/task/task.go", "pkg/harness"},
		{"pkg/task/task.go", "pkg/sandbox"},
		{"services/launcher/launcher.go", "internal/cli"},
		{"services/launcher/launcher.go", "services/verifier"},
		{"services/planner/planner.go", "pkg/bus/bustest"},
		{"services/planner/planner.go", "pkg/sandbox/docker"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("violations:\n got %v\nwant %v", got, want)
	}
}
