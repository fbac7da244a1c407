package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// The files of an agent arm's cell under the task-runs seed's names,
// beside proctor's own (docs/results.md, "A cell's files").
const (
	// PromptFile is the prompt the agent was given, as it was given.
	PromptFile = "prompt.txt"
	// SolverStreamFile is the agent's redacted output stream (the Claude
	// CLI's stream-json; claude.stream.jsonl is a link to it).
	SolverStreamFile = "solver.jsonl"
	// WorkDir is the copy of the agent's final working tree.
	WorkDir = "work"
)

// Caps of the work/ copy: the contents of the files copied, and the
// entries (files, directories, links).
const (
	MaxWorkBytes   = 256 << 20
	MaxWorkEntries = 50_000
)

// AfterSolve is what an in-container agent arm does once its solve's
// epilogue ran (the agent's processes killed, grader links removed, HOME
// and owners reset) and before the verifier: the agent's working tree is
// copied into the cell's work/ (copyWork), then the build commands of the
// instruction are run again as root (recompile). Both are recorded in
// fin (work_tree, recompile). The error is the sandbox's or the cell
// directory's; a tree that cannot be copied is recorded, never an error.
func AfterSolve(ctx context.Context, env Env, d sandbox.Driver, h *sandbox.Handle, workdir string, fin *events.FinishedData) error {
	fin.WorkTree = copyWork(ctx, d, h, workdir, env.Dir())
	rc, err := recompile(ctx, d, h, env.Task().Prompt, workdir, env.Dir())
	if err != nil {
		return err
	}
	fin.Recompile = rc
	return nil
}

// copyWork copies the working tree at workdir in the sandbox into the
// cell's work/ (sandbox.TreeCopier: links stored as links and never
// followed, within MaxWorkBytes and MaxWorkEntries, what the caps left
// out recorded). A driver without the ability, or a copy that fails, is
// recorded in the WorkTree's Error and run.log.
func copyWork(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workdir string, dir cellfs.Dir) *events.WorkTree {
	wt := &events.WorkTree{Path: workdir, CapBytes: MaxWorkBytes, CapEntries: MaxWorkEntries}
	fail := func(err error) *events.WorkTree {
		wt.Error = err.Error()
		dir.Logf("work/ not copied: %v", err)
		return wt
	}
	tc, ok := d.(sandbox.TreeCopier)
	if !ok {
		return fail(fmt.Errorf("the sandbox driver %T cannot copy a tree out within a cap", d))
	}
	stage := dir.Path(".work-copy")
	dst := dir.Path(WorkDir)
	for _, p := range []string{stage, dst} {
		if err := os.RemoveAll(p); err != nil {
			return fail(err)
		}
	}
	defer os.RemoveAll(stage)
	got, err := tc.CopyOutTree(ctx, h, workdir, stage, sandbox.TreeLimits{MaxBytes: MaxWorkBytes, MaxEntries: MaxWorkEntries})
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			err = fmt.Errorf("%s is not in the sandbox", workdir)
		}
		return fail(err)
	}
	if err := os.Rename(filepath.Join(stage, path.Base(path.Clean(workdir))), dst); err != nil {
		return fail(err)
	}
	wt.Files, wt.Dirs, wt.Symlinks, wt.Bytes = got.Files, got.Dirs, got.Links, got.Bytes
	wt.Truncated, wt.SkippedEntries, wt.SkippedBytes, wt.Skipped = got.Truncated, got.SkippedEntries, got.SkippedBytes, got.Skipped
	if wt.Truncated {
		dir.Logf("work/: the cap (%d bytes, %d entries) left out %d entries (%d bytes of files): %v", MaxWorkBytes, MaxWorkEntries, wt.SkippedEntries, wt.SkippedBytes, wt.Skipped)
	}
	return wt
}

// writeCellFile writes data to the cell's file name (replacing what was
// there, a link included).
func writeCellFile(dir cellfs.Dir, name string, data []byte) error {
	p := dir.Path(name)
	_ = os.Remove(p)
	return os.WriteFile(p, data, 0o644)
}

// writeSolverJSON writes v as the cell's solver.json (SolverFile): the
// Claude CLI's last result event, or an agent's final claim and metrics.
func writeSolverJSON(dir cellfs.Dir, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeCellFile(dir, SolverFile, append(b, '\n'))
}

// linkCellFile makes the cell's file name a relative symlink to target
// (a file of the same directory), replacing what was there.
func linkCellFile(dir cellfs.Dir, name, target string) error {
	p := dir.Path(name)
	_ = os.Remove(p)
	return os.Symlink(target, p)
}

// storeCLIStream reads a CLI's stream file back from the sandbox (path,
// at most maxStreamBytes), stores it redacted as the cell's solver.jsonl
// with <cli>.stream.jsonl a link to it, and the prompt as prompt.txt. It
// returns the redacted text and the read's error (logged: the live lines
// stand when the file cannot be read); err is the cell directory's.
func storeCLIStream(ctx context.Context, dir cellfs.Dir, reader sandbox.FileReader, h *sandbox.Handle, cli, path string, red *Redactor, prompt string) (text string, readErr, err error) {
	raw, readErr := reader.ReadFile(ctx, h, path, maxStreamBytes)
	if readErr != nil {
		dir.Logf("%s: read %s back: %v (the live lines stand)", cli, path, readErr)
	}
	text = red.String(string(raw))
	if err := writeCellFile(dir, SolverStreamFile, []byte(text)); err != nil {
		return "", readErr, err
	}
	if err := linkCellFile(dir, cli+".stream.jsonl", SolverStreamFile); err != nil {
		return "", readErr, err
	}
	if err := writeCellFile(dir, PromptFile, []byte(prompt)); err != nil {
		return "", readErr, err
	}
	return text, readErr, nil
}
