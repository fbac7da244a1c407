package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// StagingRoot is the host directory under which cells stage the files they
// copy into a sandbox that must never stay on the host (a provider env
// file holding an API key): $TMPDIR/proctor-staging, mode 0700.
func StagingRoot() string { return filepath.Join(os.TempDir(), "proctor-staging") }

// StageDir creates a private directory (0700) under StagingRoot for one
// cell of run runID to stage files in, named "<runID>-<random>". The cell
// removes it as soon as its files are copied in; one a killed proctor
// (kill -9) leaves behind is removed by `proctor gc` with the run's
// containers (GCStaging).
func StageDir(runID string) (string, error) {
	if runID == "" || strings.ContainsAny(runID, `/\`) {
		return "", fmt.Errorf("staging directory: bad run id %q", runID)
	}
	root := StagingRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("staging directory: %w", err)
	}
	return os.MkdirTemp(root, runID+"-")
}

// GCStaging removes the staging directories (StageDir) of every run for
// which dead(runID) is true and returns how many it removed. A missing
// StagingRoot is nothing to remove. Entries that are not a run's staging
// directory are left alone.
func GCStaging(dead func(runID string) bool) (int, error) {
	entries, err := os.ReadDir(StagingRoot())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("staging directories: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		i := strings.LastIndexByte(e.Name(), '-')
		if !e.IsDir() || i <= 0 || !dead(e.Name()[:i]) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(StagingRoot(), e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
