package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/internal/allocator"
)

// Exit codes (CLI.md). Scripts depend on them.
const (
	// ExitOK: the command ran; pools may still be invalid and claims
	// unallocatable (unless --strict).
	ExitOK = 0
	// ExitInvalidInput: a file, document, object or field is wrong, or the
	// cluster could not be read.
	ExitInvalidInput = 1
	// ExitUsage: bad flags or arguments, or help was asked for.
	ExitUsage = 2
	// ExitUnhealthy: validate --strict found a pool that is not Healthy.
	ExitUnhealthy = 3
)

// App is kubectl-dra with its environment. Tests build one with fakes; Run
// builds the real one.
type App struct {
	// Stdin is read by -f -.
	Stdin io.Reader
	// Stdout receives the output of commands, and only that.
	Stdout io.Writer
	// Stderr receives usage, warnings and errors.
	Stderr io.Writer
	// Now is the clock for ages in the live view.
	Now func() time.Time
	// Engines constructs the allocation engines simulate offers, by name.
	Engines map[string]func() allocator.Engine
	// NewClient returns a client for the live view from a kubeconfig path
	// (empty: $KUBECONFIG or ~/.kube/config) and a context name (empty: the
	// current context).
	NewClient func(kubeconfig, context string) (client.Reader, error)
	// Probe probes the feature gates of the cluster a kubeconfig points
	// at, for a live explanation when no DRAStack holds a probe; nil
	// skips the probe (Kubernetes 1.37's defaults).
	Probe func(ctx context.Context, kubeconfig, context string) (*v1alpha1.ClusterStatus, error)
}

// Run runs kubectl-dra with its arguments (without the program name) and
// returns the exit code. Interrupting it (Ctrl-C) cancels the work in
// progress.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	app := &App{
		Stdin:     stdin,
		Stdout:    stdout,
		Stderr:    stderr,
		Now:       time.Now,
		Engines:   DefaultEngines(),
		NewClient: NewClient,
		Probe:     ProbeCluster,
	}
	return app.Run(ctx, args)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(a *App, ctx context.Context, args []string) error
}

var commands = []command{
	{"validate", "validate the resource pools of ResourceSlices read from files", (*App).validate},
	{"simulate", "allocate the claims read from files, as the scheduler would", (*App).simulate},
	{"explain", "explain why a claim or a pod is or is not allocated", (*App).explainClaim},
	{"pools", "show the DevicePools of the cluster with their problems", (*App).pools},
}

// Run runs one command line and returns the exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		a.usage()
		return ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		a.usage()
		return ExitUsage
	}
	for _, c := range commands {
		if c.name == args[0] {
			return a.exit(c.run(a, ctx, args[1:]))
		}
	}
	fmt.Fprintf(a.Stderr, "error: unknown command %q\n\n", args[0])
	a.usage()
	return ExitUsage
}

// exit reports err on stderr and maps it to an exit code.
func (a *App) exit(err error) int {
	var (
		usage  *usageError
		input  *InputError
		status *statusError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &usage):
		if usage.help != "" {
			if usage.msg != "" {
				fmt.Fprintf(a.Stderr, "error: %s\n\n", usage.msg)
			}
			fmt.Fprint(a.Stderr, usage.help)
		} else {
			fmt.Fprintf(a.Stderr, "error: %s\n", usage.msg)
		}
		return ExitUsage
	case errors.As(err, &input):
		fmt.Fprintf(a.Stderr, "error: invalid input: %v\n", input)
		return ExitInvalidInput
	case errors.As(err, &status):
		fmt.Fprintf(a.Stderr, "error: %s\n", status.msg)
		return status.code
	default:
		fmt.Fprintf(a.Stderr, "error: %v\n", err)
		return ExitInvalidInput
	}
}

// usageError is a bad command line; help is the command's usage text.
type usageError struct {
	msg  string
	help string
}

func (e *usageError) Error() string { return e.msg }

// statusError ends a command that did its work with a non-zero exit code
// (validate --strict).
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func (a *App) usage() {
	fmt.Fprint(a.Stderr, `kubectl-dra: Dynamic Resource Allocation tools (drastack)

Usage:
  kubectl dra COMMAND [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(a.Stderr, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(a.Stderr, `
Run 'kubectl dra COMMAND --help' for the flags of a command.

Exit codes: 0 done, 1 invalid input, 2 usage error, 3 validate --strict
found a pool that is not Healthy.
`)
}
