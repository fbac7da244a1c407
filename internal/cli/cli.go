// Package cli is proctor's command line: flag parsing and wiring of the
// services and packages, nothing else. main calls Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/proctor-eval/proctor/pkg/bus"
	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=v1.2.3";
// otherwise it is the module version from the build info, or "dev".
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Exit codes.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// ErrInterrupted is returned by a command stopped by SIGINT or SIGTERM.
var ErrInterrupted = errors.New("interrupted")

type usageError struct{ error }

// Main runs the command line and returns the process exit code.
//
// Output never ends a command: a write to a closed pipe (`proctor tasks
// run … | head -3`) fails with EPIPE, which proctor's output lines ignore,
// instead of the SIGPIPE that would kill the process and leave a run
// unfinished with no artifact. Go's runtime raises SIGPIPE for a write to
// a broken pipe on fd 1 or 2 unless the program asks for the signal
// (os/signal, "SIGPIPE"); Notify does, and unlike Ignore it leaves the
// child processes proctor starts with the default disposition. A command
// whose own output then fails that way (`proctor runs list | head -3`)
// ends quietly with exit 0: the reader took what it wanted.
func Main(args []string, stdout, stderr io.Writer) int {
	return mainEnv(args, stdout, stderr, os.Getenv)
}

// MainEnv is Main with the environment taken from getenv instead of the
// process (mainEnv): commands on stores of their own run at once in one
// process, each with its own PROCTOR_HOME.
func MainEnv(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return mainEnv(args, stdout, stderr, getenv)
}

// mainEnv is Main with the variables the command line reads itself
// (PROCTOR_HOME and XDG_DATA_HOME, PROCTOR_NATS_*, PROCTOR_IMAGE_MAP, the
// probe targets, the sandbox driver's PROCTOR_* and upstream proxy
// variables) taken from getenv instead of the process environment, so
// that commands on different stores can run at once in one process. The
// arms get the same getenv (harness.Env.Getenv) for what they read (a
// model's address, a CLI's path); the delegated tools inherit the
// process's environment.
func mainEnv(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	root := newRoot(stdout, stderr, getenv)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil, readerGone(err, stdout):
		return ExitOK
	case errors.Is(err, ErrInterrupted):
		fmt.Fprintln(stderr, "proctor: interrupted")
		return ExitInterrupted
	}
	// An error can quote what an agent or a task wrote (a run's error).
	fmt.Fprintln(stderr, "proctor:", textsafe.Text(err.Error()))
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitError
}

// readerGone reports whether err is a write to stdout that failed because
// the pipe's reader closed it (`proctor runs list | head -3`): the reader
// took what it wanted, so the command ends quietly, as when it is done.
func readerGone(err error, stdout io.Writer) bool {
	f, ok := stdout.(*os.File)
	var pe *fs.PathError
	return ok && errors.As(err, &pe) && pe.Op == "write" && pe.Path == f.Name() && errors.Is(pe.Err, syscall.EPIPE)
}

type globals struct {
	stdout, stderr io.Writer
	// getenv reads the variables the command line reads itself (mainEnv).
	getenv func(string) string
	// home is the store's directory (bus.HomeFrom getenv).
	home     string
	verbose  bool
	natsURL  string
	natsAuth bus.Auth
	// replicas of the streams created on --nats (0: R3 on a cluster of 3
	// or more servers, R1 on one).
	replicas int
	// startServices starts a run's in-process services; nil is
	// startStack. Tests replace it to run a service that fails.
	startServices func(context.Context, *errgroup.Group, *bus.Bus, stackConfig) (*stack, error)
	// sandboxes replaces the sandbox driver registry (sandboxDrivers)
	// when set; tests add drivers to it.
	sandboxes []sandboxDriver
}

func (g *globals) logger() *slog.Logger {
	level := slog.LevelWarn
	if g.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
}

func newRoot(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr, getenv: getenv, home: bus.HomeFrom(getenv)}
	root := &cobra.Command{
		Use:           "proctor",
		Short:         "Run AI coding agents against executable tasks and measure them honestly",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose-log", "v", false, "log debug messages on stderr")
	root.PersistentFlags().StringVar(&g.natsURL, "nats", g.getenv("PROCTOR_NATS_URL"), "NATS URL of an external cluster (default: an embedded server storing under $PROCTOR_HOME; env PROCTOR_NATS_URL)")
	pf := root.PersistentFlags()
	pf.IntVar(&g.replicas, "replicas", 0, "replicas of the streams proctor creates on --nats (default: 3 on a cluster of 3 or more servers, 1 on one); an existing stream is never lowered")
	pf.StringVar(&g.natsAuth.User, "nats-user", g.getenv("PROCTOR_NATS_USER"), "user for --nats (env PROCTOR_NATS_USER)")
	pf.StringVar(&g.natsAuth.Password, "nats-password", g.getenv("PROCTOR_NATS_PASSWORD"), "password for --nats (env PROCTOR_NATS_PASSWORD; prefer the env, a flag shows in ps)")
	pf.StringVar(&g.natsAuth.CredsFile, "nats-creds", g.getenv("PROCTOR_NATS_CREDS"), "credentials file (user JWT + nkey seed) for --nats (env PROCTOR_NATS_CREDS)")
	pf.StringVar(&g.natsAuth.NkeySeedFile, "nats-nkey", g.getenv("PROCTOR_NATS_NKEY"), "user nkey seed file for --nats (env PROCTOR_NATS_NKEY)")

	tasks := &cobra.Command{Use: "tasks", Short: "Discover, inspect and run tasks"}
	tasks.AddCommand(newTasksRun(g), newTasksCheck(g), newTasksHarnesses(g), newTasksList(g), newTasksCoverage(g))
	root.AddCommand(tasks, newCatalog(g), newServe(g), newGC(g), newFirewall(g), newVersion(g))
	root.AddCommand(newRuns(g), newReplay(g), newReport(g), newWatch(g), newEvents(g), newDataset(g))
	root.AddCommand(newView(g), newProxy(g), newProbeInside(g), newDocs(g), newSubjects(g))
	return root
}

func newVersion(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print proctor's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(g.stdout, "proctor", version())
			return nil
		},
	}
}
