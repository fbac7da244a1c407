package isoprobe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// maxRepoWalk bounds the walk of the work tree looking for repositories.
const maxRepoWalk = 200_000

// gitHistory finds every repository in the work tree (a .git directory or
// file at any depth) and opens the class when one holds a commit HEAD does
// not reach: a later commit on a branch, tag, remote-tracking ref, in the
// reflog or stash, or an unreferenced object (a later fix readable with
// `git log --all` or `git fsck --lost-found`). Every commit object is
// enumerated, loose and packed, so where it is referenced from does not
// matter. n/a when the work tree holds no repository.
func gitHistory(cfg Config) Finding {
	wd := cfg.host(cfg.Workdir)
	var repos []string
	n := 0
	_ = filepath.WalkDir(wd, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if de != nil && de.IsDir() && p != wd {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > maxRepoWalk {
			return fs.SkipAll
		}
		if de.Name() == ".git" {
			repos = append(repos, filepath.Dir(p))
			if de.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if len(repos) == 0 {
		return Finding{Status: NA, Evidence: []string{"no git repository in the work tree"}}
	}
	f := Finding{Status: Closed}
	for _, r := range repos {
		rel := "/" + strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(r, filepath.Clean(cfg.Root))), "/")
		beyond, err := commitsBeyondHead(r)
		switch {
		case err != nil:
			if f.Status != Open {
				f.Status = Untested
			}
			f.add("%s: %v", rel, shortErr(err))
		case len(beyond) > 0:
			f.Status = Open
			for _, c := range beyond {
				f.add("%s: commit %s beyond HEAD", rel, c)
			}
		default:
			f.add("%s: every commit is HEAD's history", rel)
		}
	}
	return f
}

// commitsBeyondHead lists "<short hash> <subject>" of every commit object
// of the repository at dir that HEAD does not reach (all of them when HEAD
// is unborn).
func commitsBeyondHead(dir string) ([]string, error) {
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return nil, err
	}
	reach := map[plumbing.Hash]bool{}
	head, err := repo.Head()
	switch {
	case err == nil:
		c, err := repo.CommitObject(head.Hash())
		if err != nil {
			return nil, err
		}
		iter := object.NewCommitPreorderIter(c, nil, nil)
		if err := iter.ForEach(func(c *object.Commit) error { reach[c.Hash] = true; return nil }); err != nil {
			return nil, err
		}
	case errors.Is(err, plumbing.ErrReferenceNotFound):
	default:
		return nil, err
	}
	all, err := repo.CommitObjects()
	if err != nil {
		return nil, err
	}
	var out []string
	err = all.ForEach(func(c *object.Commit) error {
		if !reach[c.Hash] {
			subj, _, _ := strings.Cut(c.Message, "\n")
			out = append(out, c.Hash.String()[:12]+" "+subj)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return out, err
	}
	sort.Strings(out)
	return out, nil
}
