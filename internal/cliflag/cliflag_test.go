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
