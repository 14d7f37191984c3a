// Package cliflag parses command lines the way people type them: flags
// before, between or after the positional arguments (GNU style), with "--"
// ending the flags. The standard library's flag package stops at the first
// positional argument, so "scr-transferd FILE --log-format json" would take
// the flag for a second file.
package cliflag

import "flag"

// Parse parses args with fs, accepting flags anywhere, and returns the
// positional arguments in order. Errors are fs.Parse's (flag.ErrHelp for
// -h and --help).
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
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
