// Command scr-ctl drives and inspects scr-transferd through the transfer
// file, with the same locking as the SCR library, so it can be used beside
// the library by job scripts and administrators.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit statuses, documented in the README.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and the answer is "no": an ERROR, a bad file, a timeout
	exitUsage   = 2 // the command line is wrong
)

// command is one scr-ctl subcommand.
type command struct {
	summary string
	usage   string // arguments after the command name
	run     func(env *env, args []string) error
}

// env is what a command writes to.
type env struct {
	stdout, stderr io.Writer
}

// usageError marks an error in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func commands() map[string]command {
	return map[string]command{
		"print": {summary: "print any kvtree hash file in tree form", usage: "[--json] [--indent N] FILE", run: cmdPrint},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout, cmds)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "scr-ctl: unknown command %q\n", args[0])
		printUsage(stderr, cmds)
		return exitUsage
	}
	err := c.run(&env{stdout: stdout, stderr: stderr}, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "scr-ctl %s: %v\nusage: scr-ctl %s %s\n", args[0], err, args[0], c.usage)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "scr-ctl %s: %v\n", args[0], err)
		return exitFailure
	}
}

func printUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: scr-ctl COMMAND [flags] [args]")
	fmt.Fprintln(w, "\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'scr-ctl COMMAND --help' for a command's flags.")
}

// newFlags returns a flag set for a command whose --help prints its usage.
func newFlags(e *env, name string, c command) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: scr-ctl %s %s\n\n%s.\n", name, c.usage, strings.ToUpper(c.summary[:1])+c.summary[1:])
		if hasFlags(fs) {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}
