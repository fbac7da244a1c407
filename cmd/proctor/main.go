// Command proctor runs AI coding agents against executable tasks and
// measures them. See README.md.
package main

import (
	"os"

	"github.com/proctor-eval/proctor/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
