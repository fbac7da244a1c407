package doclinks

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestDocLinksResolve fails when a relative link of README.md or docs/
// points at a file that does not exist or a heading that is not there.
func TestDocLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v: not the module root", files)
	}
	bs, err := Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		t.Error(b)
	}
}

// TestCheckFindsBrokenLinks runs the checker on a fixture holding a missing
// file, a missing anchor and a missing same-file anchor beside good links
// and links in code, which are not checked.
func TestCheckFindsBrokenLinks(t *testing.T) {
	bs, err := Check("testdata/bad", []string{"README.md", "docs/a.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, b.String())
	}
	want := []string{
		"README.md:4: link docs/nope.md: no such file docs/nope.md",
		"README.md:4: link docs/a.md#nowhere: no heading #nowhere in docs/a.md",
		"docs/a.md:5: link #b: no heading #b in docs/a.md",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("broken links:\n got %q\nwant %q", got, want)
	}
}
