package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/task"
)

// ArtifactsDir is the directory of a cell (or of a step, under
// steps/<name>/) that collected artifacts land in, as Harbor's trial
// artifacts/.
const ArtifactsDir = "artifacts"

// ArtifactRecord is one line of artifacts/manifest.json: what became of
// one artifacts entry.
type ArtifactRecord struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	Service     string `json:"service,omitempty"`
	// Status is "collected", "missing" (no such path in the sandbox) or
	// "not collected" (Detail says why: a compose sidecar's, a copy that
	// failed, a destination taken by an earlier entry).
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Excluded counts the entries an exclude pattern removed.
	Excluded int `json:"excluded,omitempty"`
}

// CollectArtifacts copies each artifacts entry (task.Artifact) out of the
// sandbox h into dir/artifacts/<its target>, as Harbor collects artifacts
// after the verifier: a relative source is taken in workdir; a directory
// keeps its tree, less the entries an exclude pattern matches (by base
// name or by path under the artifact); an entry of a compose sidecar is
// not collected (only the task container's are); a destination an earlier
// entry took is skipped, the first claimant kept. What became of each
// entry is written to dir/artifacts/manifest.json. A missing source or a
// failed copy is recorded there, never an error: collection never changes
// a verdict. The error is for the cell's own directory only. With no
// entries it does nothing.
//
// The copy is the driver's CopyOut: nothing is written through a symlink
// or outside the destination, whatever the agent left at the source.
func CollectArtifacts(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, list []task.Artifact, workdir string, dir cellfs.Dir) ([]ArtifactRecord, error) {
	if len(list) == 0 {
		return nil, nil
	}
	base := dir.Path(ArtifactsDir)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	var recs []ArtifactRecord
	taken := map[string]bool{}
	for i, a := range list {
		src := a.Source
		if !strings.HasPrefix(src, "/") {
			src = path.Join(cmpOr(workdir, "/"), src)
		}
		target := a.Target()
		rec := ArtifactRecord{Source: a.Source, Destination: target, Service: a.Service, Status: "not collected"}
		switch {
		case a.Service != "" && a.Service != task.MainService:
			rec.Detail = "collected only from the task container (main), not from compose service " + a.Service
		case target == "" || target == ".":
			rec.Detail = "no destination under artifacts/ (a source of / alone)"
		case overlaps(taken, target):
			rec.Detail = "its destination overlaps an earlier entry's; the first is kept"
		default:
			rec.Status, rec.Detail, rec.Excluded = collectOne(ctx, d, h, src, filepath.Join(base, filepath.FromSlash(target)), base, i, a.Exclude)
			if rec.Status == "collected" {
				taken[target] = true
			}
		}
		if rec.Status != "collected" {
			dir.Logf("artifact %s: %s: %s", a.Source, rec.Status, rec.Detail)
		}
		recs = append(recs, rec)
	}
	b, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return recs, err
	}
	return recs, os.WriteFile(filepath.Join(base, task.ManifestFile), append(b, '\n'), 0o644)
}

// collectOne copies src into dst (a path under base), through a staging
// directory of base, then applies the exclude patterns.
func collectOne(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, src, dst, base string, i int, exclude []string) (status, detail string, excluded int) {
	stage := filepath.Join(base, fmt.Sprintf(".collect-%d", i))
	defer os.RemoveAll(stage)
	if err := d.CopyOut(ctx, h, src, stage); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return "missing", "no such path in the sandbox", 0
		}
		return "not collected", err.Error(), 0
	}
	got := filepath.Join(stage, path.Base(src))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "not collected", err.Error(), 0
	}
	if err := os.Rename(got, dst); err != nil {
		return "not collected", err.Error(), 0
	}
	if len(exclude) > 0 {
		excluded = applyExclude(dst, exclude)
	}
	return "collected", "", excluded
}

// applyExclude removes the entries of the tree root whose base name or
// slash path under root matches a pattern (path.Match), and returns how
// many it removed.
func applyExclude(root string, patterns []string) int {
	n := 0
	_ = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if !excluded(patterns, de.Name(), filepath.ToSlash(rel)) {
			return nil
		}
		n++
		_ = os.RemoveAll(p)
		if de.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	return n
}

// excluded reports whether a pattern matches an entry's base name or its
// slash path under the artifact.
func excluded(patterns []string, name, rel string) bool {
	for _, pat := range patterns {
		pat = strings.TrimPrefix(strings.TrimSuffix(pat, "/"), "./")
		if ok, _ := path.Match(pat, name); ok {
			return true
		}
		if ok, _ := path.Match(pat, rel); ok {
			return true
		}
	}
	return false
}

// overlaps reports whether target equals, holds or lies in a taken one.
func overlaps(taken map[string]bool, target string) bool {
	for t := range taken {
		if t == target || strings.HasPrefix(target, t+"/") || strings.HasPrefix(t, target+"/") {
			return true
		}
	}
	return false
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
