package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/harness"
	"github.com/proctor-eval/proctor/pkg/task"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

func newTasksList(g *globals) *cobra.Command {
	var root string
	var verbose, strict bool
	cmd := &cobra.Command{
		Use:   "list --tasks-root DIR [--verbose] [--strict]",
		Short: "List the tasks under a root: name, layout, difficulty, category, revision, warnings",
		Long: `List the tasks under a root: name, layout, difficulty, category, revision
and how many warnings; each warning follows the table in full, one
"warning: TASK: ..." line each. A malformed task.toml or task.md does not stop the list:
every task that loads is listed, then each malformed definition is
reported on stderr with its file, line and key, and the command exits
non-zero (2 when every one is only a --strict refusal of unknown keys,
else 1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l := task.Loader{Strict: strict}
			d, malformed, err := l.DiscoverEach(root)
			if err != nil {
				return err
			}
			if err := d.WriteTable(g.stdout, verbose); err != nil {
				return err
			}
			if len(malformed) == 0 {
				return nil
			}
			onlyKeys := true
			for _, e := range malformed {
				fmt.Fprintln(g.stderr, "malformed:", textsafe.Line(e.Error()))
				onlyKeys = onlyKeys && errors.Is(e, task.ErrUnknownKeys)
			}
			err = fmt.Errorf("%d task %s under %s malformed (each named above); the other %d listed", len(malformed), plural(len(malformed), "definition", "definitions"), root, len(d.Tasks))
			if onlyKeys {
				return usageError{err}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&root, "tasks-root", ".", "directory holding task directories")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "also show keys read past and every warning")
	cmd.Flags().BoolVar(&strict, "strict", false, "report every task.toml / task.md holding unknown tables or keys as malformed")
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
