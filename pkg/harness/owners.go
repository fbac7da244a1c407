package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// ownersWalk lists every path of the tree it runs in ("." first) as
// "INODE:LINKS:MODE UID:GID PATH" lines (MODE the raw mode in hex), without following a symlink or leaving the
// file system, and leaves out a path holding a newline (which a line
// cannot carry): such a path keeps whatever owner it has.
const ownersWalk = `find . -xdev ! -path "$(printf '*\n*')" -exec stat -c '%i:%h:%f %u:%g %n' -- {} +`

// owned is one path's file as a walk found it.
type owned struct {
	ino   string
	links string // hard links, for a file that is not a directory
	owner string // "UID:GID"
}

// ownerSnapshot is the owner of every path of an agent's working tree as
// it was before the tree was chowned to AgentUser: what the image (and,
// in a multi-step task, the steps before) left.
type ownerSnapshot struct {
	// root is the working tree, its symlinks resolved.
	root string
	// owners maps a path relative to root ("." for root, "./a" below it)
	// to its file.
	owners map[string]owned
	// why says why there is no snapshot (the image has no find or stat):
	// the tree is then left to the agent.
	why string
}

// snapshotOwners runs as root before the working tree realWorkdir (its
// symlinks resolved) is chowned to the agent, and records the owner of
// each of its paths. An image without find or stat gives a snapshot
// that restores nothing and says why; other errors are the exec's.
func snapshotOwners(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, realWorkdir string) (*ownerSnapshot, error) {
	s := &ownerSnapshot{root: realWorkdir}
	owners, why, err := walkOwners(ctx, d, h, realWorkdir)
	if err != nil {
		return nil, fmt.Errorf("record the owners of the working tree %s: %w", realWorkdir, err)
	}
	s.owners, s.why = owners, why
	return s, nil
}

// walkOwners runs ownersWalk in dir as root and parses it; why is set,
// with no error, when the image cannot run it.
func walkOwners(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, dir string) (map[string]owned, string, error) {
	var out, errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd:    []string{"sh", "-c", `command -v find >/dev/null && command -v stat >/dev/null || exit 127; cd "$1" && ` + ownersWalk, "sh", dir},
		Stdout: &out, Stderr: &errOut, Timeout: 5 * time.Minute,
	})
	switch {
	case err != nil:
		return nil, "", err
	case res.ExitCode == 127:
		return nil, "the image has no find or stat to list the working tree's owners", nil
	case res.ExitCode != 0:
		return nil, "", fmt.Errorf("exit %d: %s", res.ExitCode, cellfs.Suffix(errOut.String(), 300))
	}
	owners := map[string]owned{}
	for _, l := range strings.Split(out.String(), "\n") {
		ino, rest, ok1 := strings.Cut(l, " ")
		o, p, ok2 := strings.Cut(rest, " ")
		if !ok1 || !ok2 || !strings.Contains(o, ":") {
			continue
		}
		f := owned{owner: o}
		var mode string
		f.ino, rest, _ = strings.Cut(ino, ":")
		f.links, mode, _ = strings.Cut(rest, ":")
		if m, err := strconv.ParseUint(mode, 16, 32); err != nil || m&0o170000 == 0o040000 {
			f.links = "" // a directory's links count its subdirectories
		}
		owners[p] = f
	}
	return owners, "", nil
}

// restore runs as root after the agent's processes are killed and before
// the verifier (DESIGN §4, "The agent's working directory"): every file
// of the working tree that the snapshot holds — the same path and the
// same inode, so the file itself, edited or not, never one the agent put
// in its place — gets back the owner it had then, so the verifier sees
// the tree owned as the image had it (git, for one, refuses a repository
// owned by another user: "dubious ownership"); what the agent created or
// put in place of a file stays uid 10001's. The current tree is walked,
// never following a symlink, and each path is chowned with -h, so
// nothing outside the tree changes owner: not the target of a link the
// agent left, and not a file it hard-linked into the tree (another
// inode). It returns how many paths changed owner.
func (s *ownerSnapshot) restore(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) (int, error) {
	if s == nil || s.owners == nil {
		return 0, nil
	}
	now, why, err := walkOwners(ctx, d, h, s.root)
	if err == nil && why != "" {
		err = fmt.Errorf("%s", why)
	}
	if err != nil {
		return 0, fmt.Errorf("list the owners of the working tree %s: %w", s.root, err)
	}
	byOwner, n := ownersBack(s.owners, now)
	return s.chownBack(ctx, d, h, byOwner, n)
}

// restoreByPath is restore for a working tree that was replaced by a
// copy (a host arm's, copied back): every path the snapshot holds gets
// back the owner it had, whatever its inode now; what the agent created
// keeps the owner the copy gave it (root). Paths are chowned with -h.
func (s *ownerSnapshot) restoreByPath(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) (int, error) {
	if s == nil || s.owners == nil {
		return 0, nil
	}
	now, why, err := walkOwners(ctx, d, h, s.root)
	if err == nil && why != "" {
		err = fmt.Errorf("%s", why)
	}
	if err != nil {
		return 0, fmt.Errorf("list the owners of the working tree %s: %w", s.root, err)
	}
	byOwner, n := map[string][]string{}, 0
	for p, f := range now {
		if was, ok := s.owners[p]; ok && was.owner != f.owner {
			byOwner[was.owner] = append(byOwner[was.owner], p)
			n++
		}
	}
	return s.chownBack(ctx, d, h, byOwner, n)
}

// chownBack gives the n paths of byOwner (relative to the tree, by owner
// "UID:GID") their owner, with chown -h, as root in the sandbox.
func (s *ownerSnapshot) chownBack(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, byOwner map[string][]string, n int) (int, error) {
	if n == 0 {
		return 0, nil
	}
	// One file per owner of NUL-separated paths (relative, "./..."),
	// copied in and handed to chown -h through xargs.
	host, err := os.MkdirTemp("", "proctor-owners-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(host)
	for o, paths := range byOwner {
		slices.Sort(paths)
		if err := os.WriteFile(filepath.Join(host, strings.Replace(o, ":", "_", 1)), []byte(strings.Join(paths, "\x00")+"\x00"), 0o600); err != nil {
			return 0, err
		}
	}
	stage := StagePath("owners")
	if err := d.CopyIn(ctx, h, host, stage); err != nil {
		return 0, fmt.Errorf("copy the working tree's owners in: %w", err)
	}
	var errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", `S=$1; cd "$2" || exit 1
for f in "$S"/*; do
  o=$(basename "$f" | tr _ :)
  xargs -0 -r chown -h "$o" -- < "$f" || exit 1
done
rm -rf "$(dirname "$S")"`, "sh", stage, s.root},
		Stderr: &errOut, Timeout: 5 * time.Minute,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, cellfs.Suffix(errOut.String(), 300))
	}
	if err != nil {
		return 0, fmt.Errorf("give the working tree %s its owners back: %w", s.root, err)
	}
	return n, nil
}

// ownersBack returns, by owner ("UID:GID"), the paths of now that get
// back the owner they had in before, and how many. A path gets it back
// when it holds the same file as before: the same inode (overlayfs keeps
// a file's inode number when the chown copies it up, when its layers
// share one file system), or, where the inodes changed (the tree's root
// has another inode now), a file that is not a directory with as many
// hard links as before (a link the agent made to a file elsewhere
// changes that); a directory then counts as the same by its path.
func ownersBack(before, now map[string]owned) (map[string][]string, int) {
	byOwner := map[string][]string{}
	n := 0
	stable := now["."].ino == before["."].ino
	for p, f := range now {
		was, ok := before[p]
		if !ok || was.owner == f.owner {
			continue
		}
		same := was.ino == f.ino
		if !stable {
			same = was.links == f.links
		}
		if same {
			byOwner[was.owner] = append(byOwner[was.owner], p)
			n++
		}
	}
	return byOwner, n
}

// noteOwners records, as isolation.work_tree_owners, whom the verifier
// finds owning the working tree: "image" (the owners of before the
// agent, restored; what the agent created stays its own) or "agent"
// (left as the agent had it, with the reason in the cell log).
func noteOwners(dir cellfs.Dir, iso map[string]any, s *ownerSnapshot, restored int) {
	if s == nil {
		return
	}
	if s.owners == nil {
		iso["work_tree_owners"] = "agent"
		dir.Logf("the working tree %s stays the agent's for the verifier: %s", s.root, s.why)
		return
	}
	iso["work_tree_owners"] = "image"
	dir.Logf("the working tree %s: %d path(s) given back the owner they had before the agent", s.root, restored)
}
