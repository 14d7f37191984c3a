package cliflag

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		pos     []string
		format  string
		verbose bool
	}{
		{[]string{"FILE"}, []string{"FILE"}, "console", false},
		{[]string{"--format", "json", "FILE"}, []string{"FILE"}, "json", false},
		{[]string{"FILE", "--format", "json"}, []string{"FILE"}, "json", false},
		{[]string{"FILE", "--format=json", "-v"}, []string{"FILE"}, "json", true},
		{[]string{"a", "-v", "b"}, []string{"a", "b"}, "console", true},
		{[]string{"-v", "--", "--format", "x"}, []string{"--format", "x"}, "console", true},
		{[]string{"a", "--", "-v"}, []string{"a", "-v"}, "console", false},
		{nil, nil, "console", false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		format := fs.String("format", "console", "")
		verbose := fs.Bool("v", false, "")
		pos, err := Parse(fs, tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !slices.Equal(pos, tc.pos) || *format != tc.format || *verbose != tc.verbose {
			t.Errorf("%q: positional %q, format %q, v %v; want %q, %q, %v", tc.args, pos, *format, *verbose, tc.pos, tc.format, tc.verbose)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		help bool
	}{
		{[]string{"FILE", "--help"}, true},
		{[]string{"-h"}, true},
		{[]string{"FILE", "--nope"}, false},
		{[]string{"FILE", "--format"}, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("format", "console", "")
		_, err := Parse(fs, tc.args)
		if err == nil || errors.Is(err, flag.ErrHelp) != tc.help {
			t.Errorf("%q: error %v, want help %v", tc.args, err, tc.help)
		}
	}
}

// TestNumbersArePositional: with Numbers, a negative number is an argument
// for the command to judge; without, it is an unknown flag.
func TestNumbersArePositional(t *testing.T) {
	for _, tc := range []struct {
		numbers bool
		args    []string
		pos     []string
		err     bool
	}{
		{true, []string{"FILE", "bw", "-5"}, []string{"FILE", "bw", "-5"}, false},
		{true, []string{"-1.5M", "-v", "x"}, []string{"-1.5M", "x"}, false},
		{true, []string{"-.5", "--", "-3"}, []string{"-.5", "-3"}, false},
		{true, []string{"-x"}, nil, true},
		{false, []string{"FILE", "-5"}, nil, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Bool("v", false, "")
		pos, err := Parser{Numbers: tc.numbers}.Parse(fs, tc.args)
		if (err != nil) != tc.err || !slices.Equal(pos, tc.pos) {
			t.Errorf("numbers %v, %q: %q, %v; want %q, error %v", tc.numbers, tc.args, pos, err, tc.pos, tc.err)
		}
	}
}

// TestExplain: each kind of mistake is worded with what to do about it.
func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--timout", "3s"}, "unknown flag --timout; did you mean --timeout?"},
		{[]string{"--quite"}, "unknown flag --quite; did you mean --quiet?"},
		{[]string{"--zzzzzz"}, "unknown flag --zzzzzz"},
		{[]string{"--timeout"}, "flag --timeout needs a value"},
		{[]string{"--timeout=abc"}, `--timeout "abc": want a duration such as 500ms, 30s, 5m or 1h`},
		{[]string{"--quiet=maybe"}, `--quiet "maybe": want true or false`},
		{[]string{"--count=x"}, `--count "x": parse error`},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Duration("timeout", 0, "")
		fs.Bool("quiet", false, "")
		fs.Int("count", 0, "")
		_, err := Parse(fs, tc.args)
		if err == nil {
			t.Errorf("%q: no error", tc.args)
			continue
		}
		if got := Explain(fs, err); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.args, got, tc.want)
		}
	}
	if got := Nearest("stats", []string{"status", "stop", "set"}); got != "status" {
		t.Errorf("Nearest(stats) = %q", got)
	}
	if got := Nearest("xyzzy", []string{"status", "stop"}); got != "" {
		t.Errorf("Nearest(xyzzy) = %q, want none", got)
	}
}
