package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/isoprobe"
)

// newProbeInside is the isolation probe's program, run by the probe
// harness inside the sandbox as the agent's user (hidden: it is not a
// command for people). It reads the configuration the harness copied in,
// probes every leak class (isoprobe.Run) and prints the report as one JSON
// document on stdout.
func newProbeInside(g *globals) *cobra.Command {
	var cfgFile string
	cmd := &cobra.Command{
		Use:    "probe-inside --config FILE",
		Short:  "Run the isolation probe in this sandbox and print its JSON report",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfgFile == "" {
				return usageError{errors.New("probe-inside needs --config FILE")}
			}
			b, err := os.ReadFile(cfgFile)
			if err != nil {
				return err
			}
			var cfg isoprobe.Config
			if err := json.Unmarshal(b, &cfg); err != nil {
				return fmt.Errorf("%s: %w", cfgFile, err)
			}
			rep := isoprobe.Run(cmd.Context(), cfg, os.Environ())
			return json.NewEncoder(g.stdout).Encode(rep)
		},
	}
	cmd.Flags().StringVar(&cfgFile, "config", "", "the probe's configuration (JSON, written by the probe harness)")
	return cmd
}
