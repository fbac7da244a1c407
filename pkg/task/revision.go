package task

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
// skipped.
func revision(dir, root string) (string, []linkIssue, error) {
	type entry struct {
		rel  string
		path string // file to hash, or "" for an unfollowed link
		link string
	}
	var entries []entry
	var issues []linkIssue
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
		des, err := os.ReadDir(real)
		if err != nil {
			return err
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
				switch {
				case err != nil:
					issues = append(issues, linkIssue{rel: r, target: text, kind: linkDangling})
				case !within(resolved, root):
					issues = append(issues, linkIssue{rel: r, target: text, kind: linkOutside})
				case fi.IsDir() && ancestors[resolved]:
					issues = append(issues, linkIssue{rel: r, target: text, kind: linkCycle})
				}
				if err != nil || !within(resolved, root) || (fi.IsDir() && ancestors[resolved]) {
					entries = append(entries, entry{rel: r, link: text})
					continue
				}
				target = resolved
				mode = fi.Mode().Type()
			}
			switch {
			case mode.IsDir():
				ancestors[target] = true
				err := walk(target, r)
				delete(ancestors, target)
				if err != nil {
					return err
				}
			case mode.IsRegular():
				entries = append(entries, entry{rel: r, path: target})
			}
		}
		return nil
	}
	if err := walk(dir, ""); err != nil {
		return "", nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].rel < entries[j].rel })
	manifest := sha256.New()
	buf := make([]byte, 64*1024)
	for _, e := range entries {
		if e.path == "" {
			fmt.Fprintf(manifest, "%s\x00->%s\n", e.rel, e.link)
			continue
		}
		sum, err := fileSHA256(e.path, buf)
		if err != nil {
			return "", nil, err
		}
		fmt.Fprintf(manifest, "%s\x00%s\n", e.rel, sum)
	}
	sort.Slice(issues, func(i, j int) bool { return issues[i].rel < issues[j].rel })
	return hex.EncodeToString(manifest.Sum(nil)), issues, nil
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

func fileSHA256(path string, buf []byte) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

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
