package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// usageError is a mistake in how outboxrelay was called: an unknown
// command or flag, a missing or extra argument. The usage has been printed
// to stderr; main exits 2 for it, as flag-parsing tools do, so a script
// can tell a typo in its call from a failure of the work.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// commandUsage is what `outboxrelay COMMAND -h` prints.
type commandUsage struct {
	// text is the synopsis and what the command does; the flags follow it.
	text string
	// docs names the page of docs/ that explains the command.
	docs string
}

// newFlagSet makes the flag set of a command; name is the whole command,
// "outboxrelay run", which starts each of its usage errors. It prints
// nothing itself: parseFlags prints the usage where it belongs.
func newFlagSet(name string, u commandUsage) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, u.text)
		if hasFlags(fs) {
			fmt.Fprint(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
		fmt.Fprintf(w, "\nDocumentation: %s\n", u.docs)
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	return has
}

// parseFlags parses a command's arguments, of which it expects at most
// maxArgs (-1: any number) after the flags. Asked for help (-h, -help,
// --help), it prints the usage to stdout and returns flag.ErrHelp, which
// main turns into exit 0: help is not an error, and `outboxrelay run -h |
// less` shows it. A bad flag or too many arguments prints the usage to
// stderr and returns a usageError.
func parseFlags(fs *flag.FlagSet, args []string, maxArgs int, stdout, stderr io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printUsage(fs, stdout)
		return flag.ErrHelp
	case err != nil:
		// A bad flag or value: reported below like a wrong argument.
	case maxArgs >= 0 && fs.NArg() > maxArgs:
		err = fmt.Errorf("unexpected argument %q", strings.Join(fs.Args()[maxArgs:], " "))
	default:
		return nil
	}
	printUsage(fs, stderr)
	return usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
}

// configProblems introduces the problems config.Load found, one a line,
// so that the first is not read as the heading of the others.
func configProblems(err error) error {
	return fmt.Errorf("the configuration has problems; fix them first:\n%w", err)
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fs.SetOutput(w)
	fs.Usage()
	fs.SetOutput(io.Discard)
}
