package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/proctor-eval/proctor/services/launcher"
)

// docEnvPrefixes name the environment variables that flag defaults are read
// from; the reference is written as if none of them were set.
var docEnvPrefixes = []string{"PROCTOR_", "ANTHROPIC_"}

// newDocs is the hidden `proctor docs cli`, which prints docs/cli.md.
func newDocs(g *globals) *cobra.Command {
	docs := &cobra.Command{Use: "docs", Short: "Generate reference documentation", Hidden: true}
	docs.AddCommand(&cobra.Command{
		Use:   "cli",
		Short: "Print the command reference (docs/cli.md) on stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, kv := range os.Environ() {
				k, _, _ := strings.Cut(kv, "=")
				if docEnvVar(k) {
					os.Unsetenv(k)
				}
			}
			return writeCLIReference(g.stdout)
		},
	})
	return docs
}

func docEnvVar(k string) bool {
	for _, p := range docEnvPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// writeCLIReference writes the Markdown reference of every visible command
// of a fresh command tree to w: its use, description and flags.
//
// The output depends only on the code and the environment variables of
// docEnvPrefixes (the caller clears them): a default computed from this
// machine (the CPU count) is written as the rule that computes it, so the
// file is the same on every machine. TestCLIReference compares it with
// docs/cli.md.
func writeCLIReference(w io.Writer) error {
	root := newRoot(io.Discard, io.Discard, os.Getenv)
	machineDefaults := map[string][2]string{
		"concurrency": {strconv.Itoa(launcher.DefaultConcurrency()), "2 × CPUs"},
	}
	var b strings.Builder
	b.WriteString("# Command reference\n\n")
	b.WriteString("Generated from the command line by `make docs` (`proctor docs cli > docs/cli.md`);\n")
	b.WriteString("`TestCLIReference` fails when this file differs from what the code prints. Do not edit it by hand:\n")
	b.WriteString("change the command's `Short`, `Long` or flag usage and run `make docs`.\n\n")
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		cmds = append(cmds, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	for _, c := range cmds {
		if c != root {
			fmt.Fprintf(&b, "- [`%s`](#%s): %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
		}
	}
	b.WriteString("\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "## %s\n\n", c.CommandPath())
		if c.Short != "" {
			fmt.Fprintf(&b, "%s.\n\n", strings.TrimSuffix(c.Short, "."))
		}
		if c.Long != "" {
			fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(c.Long))
		}
		if c.Runnable() {
			fmt.Fprintf(&b, "```\n%s\n```\n\n", c.UseLine())
		}
		if subs := visible(c.Commands()); len(subs) > 0 {
			b.WriteString("Commands:\n\n")
			for _, s := range subs {
				fmt.Fprintf(&b, "- [`%s`](#%s): %s\n", s.CommandPath(), anchor(s.CommandPath()), s.Short)
			}
			b.WriteString("\n")
		}
		flags := c.LocalFlags()
		if c == root {
			flags = c.PersistentFlags()
		}
		flags.VisitAll(func(f *pflag.Flag) {
			if d, ok := machineDefaults[f.Name]; ok && f.DefValue == d[0] {
				f.DefValue = d[1]
			}
		})
		if u := flags.FlagUsagesWrapped(0); c.HasAvailableLocalFlags() && u != "" || c == root {
			if c == root {
				b.WriteString("Global flags (every command takes them):\n\n")
			} else {
				b.WriteString("Flags:\n\n")
			}
			fmt.Fprintf(&b, "```\n%s```\n\n", u)
		}
	}
	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
}

func visible(cs []*cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range cs {
		if !c.Hidden && c.Name() != "help" && c.Name() != "completion" {
			out = append(out, c)
		}
	}
	return out
}

// anchor is the heading anchor GitHub gives "## path".
func anchor(path string) string {
	return strings.ReplaceAll(strings.ToLower(path), " ", "-")
}
