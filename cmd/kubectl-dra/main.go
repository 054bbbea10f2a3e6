// Command kubectl-dra is the drastack kubectl plugin: put it on PATH and run
// `kubectl dra validate|simulate|pools`. The logic is in internal/cli.
package main

import (
	"os"

	"github.com/drastack/drastack/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
