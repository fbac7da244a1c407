package trees

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/task"
)

// OutputName is the object name of one attempt of a cell's output
// directory: cell/<run>/<cell hash>/<attempt>. Each attempt has its own,
// so a retry never overwrites, and a reader never mistakes, an earlier
// attempt's files.
func OutputName(runID, cellID string, attempt int) string {
	return "cell/" + runID + "/" + events.CellHash(cellID) + "/" + strconv.Itoa(attempt)
}

// Output is a stored output directory.
type Output struct {
	// Name is the object's name (OutputName).
	Name string
	// Digest is the digest of the files stored (OutputDigest).
	Digest string
}

// PutOutput stores the output directory dir under name and returns the
// digest of what it stored. Links are stored as links, never followed
// (an agent's work/ is hostile: a link is not a way to copy the host's
// files, nor to multiply one file); a link whose target leaves dir is
// left out. The object becomes visible only when its last chunk is
// stored: a process killed during PutOutput leaves no object of the name.
func PutOutput(ctx context.Context, store jetstream.ObjectStore, name, dir string) (Output, error) {
	entries, err := walkOutput(dir)
	if err != nil {
		return Output{}, fmt.Errorf("trees: %w", err)
	}
	digest, err := upload(ctx, store, jetstream.ObjectMeta{Name: name}, dir, entries, true)
	if err != nil {
		return Output{}, err
	}
	return Output{Name: name, Digest: digest}, nil
}

// OutputDigest is the digest of the output directory dir as PutOutput
// stores it.
func OutputDigest(dir string) (string, error) {
	entries, err := walkOutput(dir)
	if err != nil {
		return "", fmt.Errorf("trees: %w", err)
	}
	return writeTar(io.Discard, dir, entries, true)
}

// FetchOutput materialises the stored output o at dest: it extracts the
// object into a temporary directory beside dest, checks the digest
// (ErrDigest), and only then replaces dest (whatever an earlier attempt
// left there) with it.
func FetchOutput(ctx context.Context, store jetstream.ObjectStore, o Output, dest string) error {
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("trees: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dest)+".fetch-")
	if err != nil {
		return fmt.Errorf("trees: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := download(ctx, store, o.Name, tmp, DefaultLimits); err != nil {
		return err
	}
	got, err := OutputDigest(tmp)
	if err != nil {
		return err
	}
	if got != o.Digest {
		return fmt.Errorf("%w: object %s holds files of digest %s, its verdict says %s", ErrDigest, o.Name, got, o.Digest)
	}
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("trees: %w", err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("trees: %w", err)
	}
	return nil
}

// walkOutput lists the regular files and links under dir, following no
// link, sorted by path.
func walkOutput(dir string) ([]task.TreeEntry, error) {
	var out []task.TreeEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsRegular():
			out = append(out, task.TreeEntry{Rel: rel, Path: p})
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, task.TreeEntry{Rel: rel, Link: target})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rel < out[j].Rel })
	return out, nil
}
