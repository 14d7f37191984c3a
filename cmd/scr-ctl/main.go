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
// SIGTERM), its output streams, and the clock and terminal it sees.
type env struct {
	ctx            context.Context
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
		"add": {summary: "add a file to flush, as the SCR library does", usage: "[--size N] TRANSFERFILE SRC DEST",
			help: helpAdd, run: cmdAdd},
		"set": {summary: "set the bandwidth limit or the working-time share, as the SCR library does", usage: "TRANSFERFILE bw|percent VALUE",
			help: helpSet, run: cmdSet},
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
	return runEnv(&env{ctx: ctx, stdout: stdout, stderr: stderr, now: time.Now, term: terminalOf(stdout)}, args)
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
		} else if near := closest(args[0], names); near != "" {
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

// parseFlags parses args, allowing flags before, between and after the
// positional arguments (everything after "--" is positional), and returns
// the positional arguments. Flag errors become usage errors; --help prints
// the usage to stdout and returns flag.ErrHelp.
func parseFlags(e *env, fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		// A negative number is an argument (set bw -5), not a flag: the
		// command then says what is wrong with it.
		for len(args) > 0 && isNegativeNumber(args[0]) {
			pos, args = append(pos, args[0]), args[1:]
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(e.stdout)
				fs.Usage()
				return nil, err
			}
			return nil, flagError(fs, err)
		}
		rest := fs.Args()
		// fs.Parse stops at the first positional argument or after "--".
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments.
func wantArgs(pos []string, n int, what string) error {
	if len(pos) != n {
		return usageError{fmt.Sprintf("want %s, got %d argument(s)", what, len(pos))}
	}
	return nil
}

// isNegativeNumber reports whether s reads as a negative number, with or
// without a unit ("-5", "-1.5M").
func isNegativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.')
}

// flagError rewrites the flag package's error for a person: an unknown
// flag with the nearest known one, a missing or malformed value.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimLeft(strings.TrimPrefix(msg, "flag provided but not defined: "), "-")
		if near := closest(name, names); near != "" {
			return usageError{fmt.Sprintf("unknown flag --%s; did you mean --%s?", name, near)}
		}
		return usageError{fmt.Sprintf("unknown flag --%s", name)}
	case strings.HasPrefix(msg, "flag needs an argument: "):
		return usageError{fmt.Sprintf("--%s needs a value", strings.TrimLeft(strings.TrimPrefix(msg, "flag needs an argument: "), "-"))}
	case strings.HasPrefix(msg, "invalid value ") || strings.HasPrefix(msg, "invalid boolean value "):
		// invalid value "x" for flag -timeout: parse error
		// invalid boolean value "x" for -quiet: parse error
		sep := " for flag -"
		if !strings.Contains(msg, sep) {
			sep = " for -"
		}
		if i := strings.Index(msg, sep); i > 0 {
			rest := msg[i+len(sep):]
			name, why, _ := strings.Cut(rest, ": ")
			val := strings.TrimPrefix(strings.TrimPrefix(msg[:i], "invalid boolean value "), "invalid value ")
			if f := fs.Lookup(name); f != nil {
				if _, ok := f.Value.(interface{ IsBoolFlag() bool }); ok {
					why = "want true or false"
				} else if _, err := time.ParseDuration(f.DefValue); err == nil {
					why = "want a duration such as 500ms, 30s, 5m or 1h"
				}
			}
			return usageError{fmt.Sprintf("--%s %s: %s", name, val, why)}
		}
	}
	return usageError{msg}
}

// closest returns the name nearest to s (a prefix of it, or at most two
// edits away), "" if none is near.
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		d := editDistance(s, n)
		if strings.HasPrefix(n, s) && len(s) >= 2 {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && n < best {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
