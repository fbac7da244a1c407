package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/task"
)

func newTasksList(g *globals) *cobra.Command {
	var root string
	var verbose, strict bool
	cmd := &cobra.Command{
		Use:   "list --tasks-root DIR [--verbose] [--strict]",
		Short: "List the tasks under a root: name, layout, difficulty, category, revision, warnings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l := task.Loader{Strict: strict}
			d, err := l.Discover(root)
			if err != nil {
				if errors.Is(err, task.ErrUnknownKeys) {
					return usageError{err}
				}
				return err
			}
			return d.WriteTable(g.stdout, verbose)
		},
	}
	cmd.Flags().StringVar(&root, "tasks-root", ".", "directory holding task directories")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "also show keys read past and every warning")
	cmd.Flags().BoolVar(&strict, "strict", false, "fail on the first task.toml / task.md holding unknown tables or keys")
	return cmd
}

func newTasksCoverage(g *globals) *cobra.Command {
	var root string
	var asJSON, strict bool
	cmd := &cobra.Command{
		Use:   "coverage --tasks-root DIR [--json] [--strict]",
		Short: "Per root: tasks, notes skipped, malformed files, files missing per layout, and what each harness would refuse",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The Harbor- and BenchFlow-backed arms' columns are their own
			// refusals, so coverage says what --dry-run says.
			l := task.Loader{Strict: strict, Refusers: harness.CoverageRefusers()}
			r, err := l.Coverage(root)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, r)
			}
			return r.WriteText(g.stdout)
		},
	}
	cmd.Flags().StringVar(&root, "tasks-root", ".", "directory holding task directories")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&strict, "strict", false, "count definitions holding unknown tables or keys as malformed")
	return cmd
}

func newCatalog(g *globals) *cobra.Command {
	var root string
	scan := &cobra.Command{
		Use:   "scan --root DIR",
		Short: "Scan a checkout of tasks and skills: counts, layouts, malformed files (JSON on stdout)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := task.ScanCatalog(root)
			if err != nil {
				return err
			}
			return writeJSON(g.stdout, c)
		},
	}
	scan.Flags().StringVar(&root, "root", ".", "the checkout to scan")
	cat := &cobra.Command{Use: "catalog", Short: "Inspect checkouts of task suites"}
	cat.AddCommand(scan)
	return cat
}
