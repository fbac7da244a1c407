package task

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"path/filepath"
)

// TreeEntry is one path of a directory as its revision sees it: a regular
// file (Path set, symbolic links inside the root resolved) or a link that
// is not followed (Link set: it dangles, leaves the root or points back at
// a directory being walked).
type TreeEntry struct {
	// Rel is the slash-separated path relative to the directory.
	Rel string
	// Path is the file's resolved absolute path; "" for a link.
	Path string
	// Link is the text of a link that is not followed.
	Link string
}

// WalkTree lists the files and unfollowed links under dir in the order
// and with the link rules of a task's revision (see Revision hashing),
// following links whose target lies inside root; root is dir itself for
// a directory that is not a task (an agent or skill directory). It reads
// no file; Manifest hashes what it lists. dir must lie inside root.
func WalkTree(dir, root string) ([]TreeEntry, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, err
	}
	rroot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	if rroot, err = filepath.Abs(rroot); err != nil {
		return nil, err
	}
	if !within(real, rroot) {
		return nil, fmt.Errorf("%s: not inside %s", dir, root)
	}
	tr, err := walkTree(real, rroot, nil)
	if err != nil {
		return nil, err
	}
	out := make([]TreeEntry, len(tr.entries))
	for i, e := range tr.entries {
		out[i] = TreeEntry{Rel: e.rel, Path: e.real, Link: e.link}
	}
	return out, nil
}

// Manifest builds a revision: fed each entry of a tree in WalkTree's
// order, its Sum is the hex SHA-256 a task of that tree has as its
// Revision.
type Manifest struct {
	h   hash.Hash
	hex [2 * sha256.Size]byte
}

// NewManifest returns an empty manifest.
func NewManifest() *Manifest { return &Manifest{h: sha256.New()} }

// File adds the regular file rel whose bytes have the SHA-256 sum.
func (m *Manifest) File(rel string, sum []byte) {
	hex.Encode(m.hex[:], sum)
	io.WriteString(m.h, rel)
	m.h.Write([]byte{0})
	m.h.Write(m.hex[:])
	m.h.Write([]byte{'\n'})
}

// Link adds the unfollowed link rel whose text is target.
func (m *Manifest) Link(rel, target string) {
	io.WriteString(m.h, rel)
	io.WriteString(m.h, "\x00->")
	io.WriteString(m.h, target)
	io.WriteString(m.h, "\n")
}

// Sum is the revision of the entries added so far.
func (m *Manifest) Sum() string { return hex.EncodeToString(m.h.Sum(nil)) }
