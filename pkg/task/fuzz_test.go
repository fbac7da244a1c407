package task

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedFiles adds every task.md or task.toml under testdata/golden to f.
func seedFiles(f *testing.F, base string, add func(data []byte)) {
	f.Helper()
	err := filepath.WalkDir(filepath.Join("testdata", "golden"), func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() || de.Name() != base {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		add(data)
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
}

// FuzzSplitFrontmatter: splitting and parsing frontmatter never panics, and
// a split keeps the frontmatter and body inside the normalised text.
func FuzzSplitFrontmatter(f *testing.F) {
	seedFiles(f, MarkdownFile, func(b []byte) { f.Add(b) })
	f.Add([]byte("---\n" + strings.Repeat("[", 100) + "\n---\n"))
	f.Add([]byte("---\na: &x [*x]\n---\n"))
	f.Add([]byte("\ufeff---\r\n? !!set {a}\r\n: !!binary x\r\n---\r\n## prompt\r\n\\## prompt\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := SplitFrontmatter(data)
		if err != nil {
			return
		}
		text := normalizeText(data)
		if !doc.HasFrontmatter {
			if doc.Body != text {
				t.Fatalf("without frontmatter the body must be the whole text")
			}
			return
		}
		if !strings.Contains(text, doc.Frontmatter) || !strings.HasSuffix(text, doc.Body) || len(doc.Frontmatter)+len(doc.Body) > len(text) {
			t.Fatalf("split is not a partition of the text: %+v", doc)
		}
		m, _, err := parseYAMLMapping(doc.Frontmatter, doc.FrontmatterLine)
		if err == nil && m == nil {
			t.Fatal("parse returned neither a mapping nor an error")
		}
		if _, err := extractPrompt(doc.Body, doc.BodyLine); err != nil && !strings.Contains(err.Error(), "duplicate section") {
			t.Fatalf("unexpected prompt error %v", err)
		}
	})
}

// FuzzLoad: loading any task.toml / task.md pair never panics and gives
// either a task or an error, never both or neither.
func FuzzLoad(f *testing.F) {
	seedFiles(f, TOMLFile, func(b []byte) { f.Add(b, []byte(nil)) })
	seedFiles(f, MarkdownFile, func(b []byte) { f.Add([]byte(nil), b) })
	f.Add([]byte("version = \"1.0\"\n"), []byte("---\nname: x\n---\nbody\n"))
	f.Add([]byte("[environment]\nmemory = \"1.5G\"\n[[steps]]\n"), []byte("---\ntitle: note\n---\n"))
	f.Fuzz(func(t *testing.T, toml, md []byte) {
		dir := t.TempDir()
		if toml != nil {
			if err := os.WriteFile(filepath.Join(dir, TOMLFile), toml, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if md != nil {
			if err := os.WriteFile(filepath.Join(dir, MarkdownFile), md, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l := &Loader{LookupEnv: func(string) (string, bool) { return "", false }}
		tk, err := l.Load(dir)
		if (tk == nil) == (err == nil) {
			t.Fatalf("Load returned task %v and error %v", tk, err)
		}
		if tk != nil {
			_ = tk.Refusals(nil)
			if len(tk.Revision) != 64 {
				t.Fatalf("revision %q", tk.Revision)
			}
		}
	})
}
