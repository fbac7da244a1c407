package cli

import (
	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/task"
)

func newTasksList(g *globals) *cobra.Command {
	var root string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "list --tasks-root DIR [--verbose]",
		Short: "List the tasks under a root: name, layout, difficulty, category, revision, warnings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := task.Discover(root)
			if err != nil {
				return err
			}
			return d.WriteTable(g.stdout, verbose)
		},
	}
	cmd.Flags().StringVar(&root, "tasks-root", ".", "directory holding task directories")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "also show keys read past and every warning")
	return cmd
}
