// Package cliflag parses command lines the way people type them: flags
// before, between or after the positional arguments (GNU style), with "--"
// ending the flags, and says what is wrong with a command line in words a
// person can act on. The standard library's flag package stops at the first
// positional argument, so "scr-transferd FILE --log-format json" would take
// the flag for a second file. Both scr-transferd and scr-ctl parse with it.
package cliflag

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// Parser parses a command line with a flag set.
type Parser struct {
	// Numbers makes an argument that reads as a negative number ("-5",
	// "-1.5M") where a flag could start a positional argument rather than
	// an unknown flag, for commands that take numbers as arguments: the
	// command then says what is wrong with the value.
	Numbers bool
}

// Parse parses args with fs, accepting flags anywhere, and returns the
// positional arguments in order. Errors are fs.Parse's (flag.ErrHelp for
// -h and --help); Explain words them for a person.
func Parse(fs *flag.FlagSet, args []string) ([]string, error) { return Parser{}.Parse(fs, args) }

// Parse parses args with fs as the package's Parse does, with p's options.
func (p Parser) Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		for p.Numbers && len(args) > 0 && isNegativeNumber(args[0]) {
			pos, args = append(pos, args[0]), args[1:]
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
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

// isNegativeNumber reports whether s reads as a negative number, with or
// without a unit ("-5", "-1.5M").
func isNegativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.')
}

// Explain rewords an error of Parse for a person, with the double dashes
// the documentation uses: an unknown flag with the nearest known one
// ("unknown flag --timout; did you mean --timeout?"), a flag missing its
// value ("flag --reread needs a value"), a malformed value with what is
// wanted (`--timeout "abc": want a duration such as 500ms, 30s, 5m or 1h`).
// Other errors keep their text.
func Explain(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if near := Nearest(name, names); near != "" {
			return fmt.Sprintf("unknown flag --%s; did you mean --%s?", name, near)
		}
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "flag --" + strings.TrimLeft(name, "-") + " needs a value"
	}
	// invalid value "x" for flag -timeout: parse error
	// invalid boolean value "x" for -quiet: parse error
	if strings.HasPrefix(msg, "invalid value ") || strings.HasPrefix(msg, "invalid boolean value ") {
		sep := " for flag -"
		if !strings.Contains(msg, sep) {
			sep = " for -"
		}
		if i := strings.Index(msg, sep); i > 0 {
			name, why, _ := strings.Cut(msg[i+len(sep):], ": ")
			val := strings.TrimPrefix(strings.TrimPrefix(msg[:i], "invalid boolean value "), "invalid value ")
			if f := fs.Lookup(name); f != nil {
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					why = "want true or false"
				} else if _, ok := f.Value.(flag.Getter); ok && isDuration(f) {
					why = "want a duration such as 500ms, 30s, 5m or 1h"
				}
			}
			// A value's own error may name the value already.
			why = strings.TrimPrefix(why, val+": ")
			return fmt.Sprintf("--%s %s: %s", name, val, why)
		}
	}
	return msg
}

// isDuration reports whether f holds a time.Duration.
func isDuration(f *flag.Flag) bool {
	_, ok := f.Value.(flag.Getter).Get().(time.Duration)
	return ok
}

// Nearest returns the name nearest to s (one it begins, or at most two
// edits away), "" if none is near: the hint for a mistyped flag or command.
func Nearest(s string, names []string) string {
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
