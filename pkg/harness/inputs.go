package harness

import (
	"context"
	"path/filepath"

	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// TreeFetcher is an Env that can fetch a tree the planner stored
// (events.CellPlannedData.Trees) into its node's cache and return the
// cached directory: a worker that does not see the planner's paths.
type TreeFetcher interface {
	FetchTree(ctx context.Context, digest string) (string, error)
}

// inputDir is the directory a cell reads for the input directory path
// (an agent or skill directory), resolved as pkg/cellrun resolves a
// task: path itself when nothing was stored for it or it holds the
// stored tree; else, when env is a TreeFetcher, the stored tree fetched
// into the node's cache (its digest checked: a tampered object is never
// read). A fetch that fails is an infra error naming the input, so the
// cell is errored and never runs without its input. It is the one
// resolution every arm that reads an agent or skill directory uses.
func inputDir(ctx context.Context, env Env, path string) (string, error) {
	for _, in := range env.Plan().Trees {
		if in.Path != path {
			continue
		}
		if d, err := trees.Digest(path); err == nil && d == in.Digest {
			return path, nil
		}
		f, ok := env.(TreeFetcher)
		if !ok {
			return path, nil
		}
		dir, err := f.FetchTree(ctx, in.Digest)
		if err != nil {
			return "", events.Classf(events.ClassInfra, "%s %s (stored as %.12s): %w", in.Name, path, in.Digest, err)
		}
		return dir, nil
	}
	return path, nil
}

// plannedSkill loads the skill at p (relative to the run's base
// directory; a skill directory or its SKILL.md) from the directory
// inputDir resolves it to, under the planned directory's name, with
// LoadSkill's checks (a refused skill is class refused; a skill that
// cannot be fetched is inputDir's infra error).
func plannedSkill(ctx context.Context, env Env, p string) (*Skill, error) {
	planned := skillDir(env.Spec().BaseDir, p)
	dir, err := inputDir(ctx, env, planned)
	if err != nil {
		return nil, err
	}
	s, err := loadSkillDir(dir, filepath.Base(planned))
	if err != nil {
		return nil, events.Classed(events.ClassRefused, err)
	}
	return s, nil
}
