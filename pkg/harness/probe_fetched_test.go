package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/proctor-eval/proctor/pkg/bus/bustest"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// TestForbiddenSkillOfAFetchedTree: the forbidden skill of
// docker-probe:<skill> read from its tree fetched into a worker's cache
// (the planned directory gone) keeps the planned directory's name, its
// frontmatter name and every file, and its host directory is where the
// skill is on this host (the cache), not the digest as a name.
func TestForbiddenSkillOfAFetchedTree(t *testing.T) {
	ctx := context.Background()
	b, _ := bustest.Bus(t)
	store, err := trees.Open(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	planned := filepath.Join(t.TempDir(), "pdf")
	if err := os.MkdirAll(planned, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, body := range map[string]string{"SKILL.md": "---\nname: pdf-tools\ndescription: pdf tools\n---\nSee reference.md.\n", "reference.md": "Call pdf_fix --all.\n"} {
		if err := os.WriteFile(filepath.Join(planned, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest, err := trees.Put(ctx, b, store, planned)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(planned); err != nil {
		t.Fatal(err)
	}
	fetched, err := trees.Fetch(ctx, store, digest, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fb, err := forbiddenSkillOf(planned, fetched)
	if err != nil {
		t.Fatal(err)
	}
	if fb.Name != "pdf" || !slices.Equal(fb.Names, []string{"pdf-tools"}) || fb.HostDir != filepath.ToSlash(fetched) {
		t.Errorf("forbidden skill %+v, want name pdf (also pdf-tools) at %s", fb, fetched)
	}
	var names []string
	for _, f := range fb.Files {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"SKILL.md", "reference.md"}) {
		t.Errorf("files %q", names)
	}
}
