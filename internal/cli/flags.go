package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// Output formats of -o.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

var outputFormats = []string{outputTable, outputJSON, outputYAML}

// flagSet is a subcommand's flags with its help text.
type flagSet struct {
	*pflag.FlagSet
	synopsis string
}

// newFlagSet creates the flags of a command; synopsis is the help text
// printed above the flag list.
func newFlagSet(name, synopsis string) *flagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by App.exit
	fs.SortFlags = false
	return &flagSet{FlagSet: fs, synopsis: synopsis}
}

// help is the full usage text of the command.
func (f *flagSet) help() string {
	return f.synopsis + "\nFlags:\n" + f.FlagUsages()
}

// parse parses args; a bad flag or --help is a usage error carrying the
// help text.
func (f *flagSet) parse(args []string) error {
	err := f.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return &usageError{help: f.help()}
	case err != nil:
		return &usageError{msg: err.Error(), help: f.help()}
	}
	return nil
}

// usagef is a usage error of this command.
func (f *flagSet) usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...), help: f.help()}
}

// outputFlag adds -o/--output.
func (f *flagSet) outputFlag() *string {
	return f.StringP("output", "o", outputTable, "Output `FORMAT`: "+strings.Join(outputFormats, ", ")+".")
}

// checkOutput rejects an unknown -o value.
func (f *flagSet) checkOutput(o string) error {
	if !slices.Contains(outputFormats, o) {
		return f.usagef("unknown output format %q (want one of %s)", o, strings.Join(outputFormats, ", "))
	}
	return nil
}

// fileFlag adds -f/--filename.
func (f *flagSet) fileFlag() *[]string {
	return f.StringArrayP("filename", "f", nil, "Read `FILE` (YAML or JSON) with ResourceSlices, DeviceClasses, ResourceClaims and Nodes; a directory reads its .yaml, .yml and .json files; - reads standard input. Repeatable.")
}

// checkFiles requires at least one -f and at most one -f -.
func (f *flagSet) checkFiles(files []string) error {
	if len(files) == 0 {
		return f.usagef("at least one -f FILE is required")
	}
	stdin := 0
	for _, p := range files {
		if p == "" {
			return f.usagef("-f needs a file name")
		}
		if p == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return f.usagef("-f - (standard input) can be given only once")
	}
	return nil
}
