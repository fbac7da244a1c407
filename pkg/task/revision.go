package task

import (
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Revision hashing. A task's revision is the hex SHA-256 of a manifest
// that holds one line per file under the task directory, in byte order of
// the file's slash-separated path relative to the task directory:
//
//	<path> NUL <hex SHA-256 of the file's bytes> LF
//
// Symbolic links are resolved: a link whose target lies inside the tasks
// root (a sibling task's environment/, say) is followed and the files
// reached through it are listed under the link's own path. A link that
// leaves the tasks root, dangles, or points back at a directory being walked
// (a cycle) is not followed and contributes
//
//	<path> NUL "->" <link text as written> LF
//
// instead. Directories themselves, file modes and timestamps are not hashed,
// so a fresh checkout of the same files has the same revision. Files that
// are neither regular files, directories nor links (sockets, FIFOs) are
// skipped, and so are .git directories (version-control state, which
// changes with every checkout, not with the task).

// treeEntry is one path under a task directory.
type treeEntry struct {
	rel   string // slash-separated, relative to the task directory
	real  string // resolved absolute path; "" for a link not followed
	link  string // link text, for a link not followed
	isDir bool
}

// linkIssue is a symbolic link in a task directory that was not followed.
type linkIssue struct {
	rel    string // path relative to the task directory
	target string // the link text
	kind   string
}

const (
	linkDangling = "dangling"
	linkOutside  = "outside"
	linkCycle    = "cycle"
)

// taskTree is a task directory walked once: every path (symlinks resolved
// inside the root), the contents of the few files the loader parses, and
// the revision.
type taskTree struct {
	entries  []treeEntry // files and unfollowed links, sorted by rel
	dirs     map[string]string
	files    map[string]string
	contents map[string][]byte
	issues   []linkIssue
	revision string
}

// keptFiles are read once while hashing and kept for the loader.
var keptFiles = map[string]bool{
	TOMLFile: true, MarkdownFile: true, InstructionFile: true,
	"environment/Dockerfile":          true,
	"environment/docker-compose.yaml": true,
	"environment/docker-compose.yml":  true,
}

// isStepInstruction reports whether rel is steps/<name>/instruction.md, a
// multi-step task's per-step instruction (kept like instruction.md).
func isStepInstruction(rel string) bool {
	name, ok := strings.CutPrefix(rel, "steps/")
	if !ok {
		return false
	}
	name, ok = strings.CutSuffix(name, "/"+InstructionFile)
	return ok && name != "" && !strings.Contains(name, "/")
}

// file returns the resolved path of the regular file rel, if present.
func (tr *taskTree) file(rel string) (string, bool) {
	p, ok := tr.files[rel]
	return p, ok
}

// dir returns the resolved path of the directory rel, if present.
func (tr *taskTree) dir(rel string) (string, bool) {
	p, ok := tr.dirs[rel]
	return p, ok
}

var hashBufs = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

// scanTask walks dir (absolute, real, inside root), hashes every file and
// keeps the contents of keptFiles; top, when non-nil, is dir's entries as
// already read. It fails only when a file or directory cannot be read.
func scanTask(dir, root string, top []os.DirEntry) (*taskTree, error) {
	tr, err := walkTree(dir, root, top)
	if err != nil {
		return nil, err
	}
	bufp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bufp)
	m := NewManifest()
	fileHash := sha256.New()
	var sum [sha256.Size]byte
	for _, e := range tr.entries {
		if e.real == "" {
			m.Link(e.rel, e.link)
			continue
		}
		fileHash.Reset()
		var keep *[]byte
		if keptFiles[e.rel] || isStepInstruction(e.rel) {
			keep = new([]byte)
		}
		if err := hashFile(e.real, fileHash, *bufp, keep); err != nil {
			return nil, err
		}
		if keep != nil {
			tr.contents[e.rel] = *keep
		}
		m.File(e.rel, fileHash.Sum(sum[:0]))
	}
	tr.revision = m.Sum()
	return tr, nil
}

// walkTree lists dir's files and unfollowed links (scanTask's walk),
// sorted, without reading any file.
func walkTree(dir, root string, top []os.DirEntry) (*taskTree, error) {
	tr := &taskTree{dirs: map[string]string{"": dir}, files: map[string]string{}, contents: map[string][]byte{}}
	ancestors := map[string]bool{}
	for d := dir; ; {
		ancestors[d] = true
		if d == root || !strings.HasPrefix(d, root) {
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	var walk func(real, rel string) error
	walk = func(real, rel string) error {
		des := top
		top = nil
		if rel != "" || des == nil {
			var err error
			if des, err = os.ReadDir(real); err != nil {
				return err
			}
		}
		for _, de := range des {
			p := filepath.Join(real, de.Name())
			r := de.Name()
			if rel != "" {
				r = rel + "/" + de.Name()
			}
			mode := de.Type()
			target := p
			if mode&os.ModeSymlink != 0 {
				text, _ := os.Readlink(p)
				resolved, err := filepath.EvalSymlinks(p)
				var fi os.FileInfo
				if err == nil {
					fi, err = os.Stat(resolved)
				}
				kind := ""
				switch {
				case err != nil:
					kind = linkDangling
				case !within(resolved, root):
					kind = linkOutside
				case fi.IsDir() && ancestors[resolved]:
					kind = linkCycle
				}
				if kind != "" {
					tr.issues = append(tr.issues, linkIssue{rel: r, target: text, kind: kind})
					tr.entries = append(tr.entries, treeEntry{rel: r, link: text})
					continue
				}
				target = resolved
				mode = fi.Mode().Type()
			}
			switch {
			case mode.IsDir() && de.Name() == ".git":
				continue
			case mode.IsDir():
				tr.dirs[r] = target
				ancestors[target] = true
				err := walk(target, r)
				delete(ancestors, target)
				if err != nil {
					return err
				}
			case mode.IsRegular():
				tr.files[r] = target
				tr.entries = append(tr.entries, treeEntry{rel: r, real: target})
			}
		}
		return nil
	}
	if err := walk(dir, ""); err != nil {
		return nil, err
	}
	sort.Slice(tr.entries, func(i, j int) bool { return tr.entries[i].rel < tr.entries[j].rel })
	sort.Slice(tr.issues, func(i, j int) bool { return tr.issues[i].rel < tr.issues[j].rel })

	return tr, nil
}

// pathError is an *fs.PathError without importing io/fs into the build-
// tagged readers.
type pathError = fs.PathError

// within reports whether path is root or inside it (both cleaned, absolute,
// symlink-resolved).
func within(path, root string) bool {
	if path == root {
		return true
	}
	if root == string(filepath.Separator) {
		return strings.HasPrefix(path, root)
	}
	return strings.HasPrefix(path, root+string(filepath.Separator))
}
