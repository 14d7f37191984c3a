// Command scr-ctl drives and inspects scr-transferd through the transfer
// file, with the same locking as the SCR library, so it can be used beside
// the library by job scripts and administrators.
//
//	scr-ctl COMMAND [flags] [args]
//
// Every command answers --help. Exit statuses: 0 success; 1 the command ran
// and the answer is no (a file in error, a corrupt file, a timeout); 2 the
// command line is wrong.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/cliflag"
	"github.com/scr-transferd/scr-transferd/internal/version"
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
	help    string // longer description printed by --help, may be empty
	run     func(env *env, args []string) error
}

// env is what a command works with: its context (cancelled by SIGINT or
// SIGTERM), its input and output streams, and the clock and terminal it sees.
type env struct {
	ctx            context.Context
	stdin          io.Reader // nil: empty
	stdout, stderr io.Writer
	now            func() time.Time
	// term reports whether stdout is a terminal and its size (0 when unknown).
	term func() (isTerm bool, width, height int)
}

// usageError marks an error in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func commands() map[string]command {
	return map[string]command{
		"print": {summary: "print any kvtree hash file in tree form", usage: "[--json] [--indent N] FILE", run: cmdPrint},
		"run": {summary: "ask the daemon to flush (COMMAND RUN, clears FLAG DONE)", usage: "[--wait] [--timeout D] [--create] TRANSFERFILE",
			help: helpRun, run: controlCmd("run")},
		"stop": {summary: "ask the daemon to stop copying (COMMAND STOP)", usage: "[--wait] [--timeout D] [--create] TRANSFERFILE",
			help: helpStop, run: controlCmd("stop")},
		"exit": {summary: "ask the daemon to exit (COMMAND EXIT)", usage: "[--wait] [--timeout D] [--create] TRANSFERFILE",
			help: helpExit, run: controlCmd("exit")},
		"status": {summary: "show each file's progress, rate and ETA, and the daemon's state", usage: "[--watch] [--json] [--all] TRANSFERFILE",
			help: helpStatus, run: cmdStatus},
		"wait": {summary: "wait until the flush is complete; fail when no daemon serves it", usage: "[--timeout D] [--fail-on-error] [--quiet] TRANSFERFILE",
			help: helpWait, run: cmdWait},
		"add": {summary: "add files to flush, as the SCR library does, in one update", usage: "[--size N] TRANSFERFILE SRC DEST [SRC DEST]... | --stdin TRANSFERFILE",
			help: helpAdd, run: cmdAdd},
		"set": {summary: "set the bandwidth limit or the working-time share, as the SCR library does", usage: "TRANSFERFILE bw|percent VALUE",
			help: helpSet, run: cmdSet},
		"repair": {summary: "salvage a corrupt transfer file: keep what decodes, say what was dropped", usage: "[--dry-run] TRANSFERFILE",
			help: helpRepair, run: cmdRepair},
		"verify": {summary: "identify and verify checkpoint files (SION, FTI-FF, LIME, plain)", usage: "[--json] FILE...",
			help: helpVerify, run: cmdVerify},
		"demo": {summary: "flush sample checkpoints of every kind through an in-process daemon and show it", usage: "[--dir DIR] [--bw RATE] [--cleanup] [--timeout D] [--width N]",
			help: helpDemo, run: cmdDemo},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(&env{ctx: ctx, stdin: os.Stdin, stdout: stdout, stderr: stderr, now: time.Now, term: terminalOf(stdout)}, args)
}

func runEnv(e *env, args []string) int {
	cmds := commands()
	if len(args) == 2 && args[0] == "help" {
		args = []string{args[1], "--help"} // scr-ctl help COMMAND
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Fprintln(e.stdout, "scr-ctl", version.Get())
		return exitOK
	}
	if len(args) == 1 && args[0] == "--help-man" {
		return manPage(e.stdout) // hidden: docs/man/scr-ctl.1
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		out := e.stdout
		if len(args) == 0 {
			out = e.stderr
		}
		printUsage(out, cmds)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		names := make([]string, 0, len(cmds))
		for n := range cmds {
			names = append(names, n)
		}
		hint := ""
		if strings.HasPrefix(args[0], "-") {
			hint = "; flags come after the command"
		} else if near := cliflag.Nearest(args[0], names); near != "" {
			hint = fmt.Sprintf("; did you mean %s?", near)
		}
		fmt.Fprintf(e.stderr, "scr-ctl: unknown command %q%s ('scr-ctl --help' lists the commands)\n", args[0], hint)
		return exitUsage
	}
	err := c.run(e, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "scr-ctl %s: %v\nusage: scr-ctl %s %s ('scr-ctl %s --help' for more)\n", args[0], err, args[0], c.usage, args[0])
		return exitUsage
	default:
		fmt.Fprintf(e.stderr, "scr-ctl %s: %v\n", args[0], err)
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
	fmt.Fprintln(w, "\nRun 'scr-ctl COMMAND --help' for a command's flags, 'scr-ctl --version' for the version.")
	fmt.Fprintln(w, "Exit status: 0 success, 1 the answer is no (an error, a corrupt file, a timeout), 2 wrong command line.")
	fmt.Fprintf(w, "\nExamples:\n%s\n", examples)
}

// newFlags returns a flag set for a command whose --help prints its usage.
func newFlags(name string) *flag.FlagSet {
	c := commands()[name]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package's own messages are dropped: runEnv reports usage
	// errors, and --help is printed to stdout by parseFlags.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: scr-ctl %s %s\n\n%s.\n", name, c.usage, strings.ToUpper(c.summary[:1])+c.summary[1:])
		if c.help != "" {
			fmt.Fprintf(out, "\n%s\n", strings.TrimSpace(c.help))
		}
		if hasFlags(fs) {
			fmt.Fprintln(out, "\nFlags:")
			cliflag.Help{Placeholders: placeholders()}.PrintFlags(out, fs)
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses args with internal/cliflag, allowing flags before,
// between and after the positional arguments (everything after "--" is
// positional, and so is a negative number: set bw -5 then says what is
// wrong with it), and returns the positional arguments. Flag errors become
// usage errors worded by cliflag.Explain; --help prints the usage to stdout
// and returns flag.ErrHelp.
func parseFlags(e *env, fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := cliflag.Parser{Numbers: true}.Parse(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		fs.Usage()
		return nil, err
	case err != nil:
		return nil, usageError{cliflag.Explain(fs, err)}
	}
	return pos, nil
}

// wantArgs checks the number of positional arguments.
func wantArgs(pos []string, n int, what string) error {
	if len(pos) != n {
		return usageError{fmt.Sprintf("want %s, got %d argument(s)", what, len(pos))}
	}
	return nil
}
