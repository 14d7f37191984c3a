package main

import (
	"bytes"
	"errors"
	"flag"
	"io/fs"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/units"
)

func TestFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--log-format", "json", "--retry-max=2m", "/c/transfer.scrinfo"},
		{"/c/transfer.scrinfo", "--log-format", "json", "--retry-max=2m"},
		{"--log-format=json", "/c/transfer.scrinfo", "--retry-max", "2m"},
	} {
		o, err := parse(args, new(bytes.Buffer))
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		if o.cfg.TransferFile != "/c/transfer.scrinfo" || o.logFormat != "json" || o.cfg.RetryMax != 2*time.Minute {
			t.Errorf("%q: file %q, log format %q, retry-max %v", args, o.cfg.TransferFile, o.logFormat, o.cfg.RetryMax)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"/c/transfer.scrinfo", arg}, &stdout, &stderr); code != 0 {
			t.Errorf("%s: exit code %d, want 0", arg, code)
		}
		if !strings.HasPrefix(stdout.String(), "usage: scr-transferd") || !strings.Contains(stdout.String(), "-log-format") {
			t.Errorf("%s: standard output %q, want the usage", arg, stdout.String())
		}
		if stderr.Len() != 0 {
			t.Errorf("%s: standard error %q, want nothing", arg, stderr.String())
		}
	}
}

// TestCommandLineMistakes: each mistake gets one line naming it and a hint,
// exit code 2, nothing on standard output.
func TestCommandLineMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/c/t", "--nope"}, "unknown flag --nope"},
		{[]string{"--log-format=xml", "/c/t"}, `--log-format "xml": want console or json`},
		{[]string{"--log-level", "loud", "/c/t"}, `--log-level "loud": want debug, info, warn or error`},
		{[]string{"/c/t", "--reread"}, "flag --reread needs a value"},
		{[]string{"/c/t", "--reread=soon"}, `--reread "soon": want a duration such as 500ms, 30s, 5m or 1h`},
		{[]string{"/c/t", "--verfy=off"}, "unknown flag --verfy; did you mean --verify?"},
		{[]string{"/c/t", "--nice=25"}, "--nice 25: want 0 to 19"},
		{[]string{"/c/t", "--verify=never"}, `unknown verify mode "never"`},
		{[]string{}, "want exactly one TRANSFERFILE, got 0"},
		{[]string{"/c/a", "/c/b"}, "want exactly one TRANSFERFILE, got 2"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit code %d, want 2", tc.args, code)
		}
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "scr-transferd: ") || !strings.Contains(lines[0], tc.want) ||
			!strings.Contains(lines[1], "scr-transferd --help") {
			t.Errorf("%q: standard error\n%s\nwant one line with %q and a hint to --help", tc.args, stderr.String(), tc.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("%q: standard output %q, want nothing", tc.args, stdout.String())
		}
	}
}

// TestREADMEFlagTable: the README's table of daemon flags lists exactly the
// flags --help lists, with the same defaults.
func TestREADMEFlagTable(t *testing.T) {
	documented := map[string]string{} // flag -> default column
	// Flags added since the README was last restructured are documented
	// in docs/pending until they are integrated.
	for _, doc := range []string{"../../README.md", "../../docs/pending/bwauto.md"} {
		readme, err := os.ReadFile(doc)
		if errors.Is(err, fs.ErrNotExist) && strings.Contains(doc, "/pending/") {
			continue // integrated into the README
		}
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(string(readme), "\n## Daemon flags\n")
		if !ok {
			t.Fatalf("%s has no \"## Daemon flags\" section", doc)
		}
		section, _, _ = strings.Cut(section, "\n## ")
		name := regexp.MustCompile("`--([a-z-]+)")
		for _, line := range strings.Split(section, "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 4 || !strings.Contains(cells[1], "`--") {
				continue
			}
			for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
				documented[m[1]] = strings.TrimSpace(cells[2])
			}
		}
	}
	t.Setenv("SCR_TRANSFER_SECS", "")
	t.Setenv("SCR_FILE_BUF_SIZE", "")
	_, fs, err := flags()
	if err != nil {
		t.Fatal(err)
	}
	var defined []string
	fs.VisitAll(func(f *flag.Flag) {
		defined = append(defined, f.Name)
		def, ok := documented[f.Name]
		switch {
		case !ok:
			t.Errorf("--%s is missing from the README's daemon flag table", f.Name)
		case !defaultDocumented(def, f.DefValue):
			t.Errorf("--%s: the README gives the default %q, --help %q", f.Name, def, f.DefValue)
		}
	})
	for f := range documented {
		if !slices.Contains(defined, f) {
			t.Errorf("the README documents --%s, which the daemon does not have", f)
		}
	}
}

// defaultDocumented tells whether a README default cell ("1s, 1m",
// "`SCR_TRANSFER_SECS` or 60s", "(none)") names the flag's default.
func defaultDocumented(cell, def string) bool {
	if def == "" || def == "[]" {
		return strings.Contains(cell, "(none)") || strings.Contains(cell, "(all)")
	}
	want, werr := time.ParseDuration(def)
	for _, tok := range strings.FieldsFunc(cell, func(r rune) bool { return r == ',' || r == ' ' || r == '`' }) {
		if tok == def {
			return true
		}
		if d, err := time.ParseDuration(tok); werr == nil && err == nil && d == want {
			return true
		}
		if n, err := units.ParseCount(tok, 0, math.MaxInt64); err == nil {
			if m, err := units.ParseCount(def, 0, math.MaxInt64); err == nil && n == m {
				return true
			}
		}
	}
	return false
}

// TestSizeFlagsTakeUnits: every size the daemon is given, by flag or from
// the environment, is read by the one parser (internal/units).
func TestSizeFlagsTakeUnits(t *testing.T) {
	for _, tc := range []struct {
		env       string // SCR_FILE_BUF_SIZE
		args      []string
		buf, sync int64
		wantErr   string
	}{
		{args: []string{"--buf-size", "4M", "/c/t"}, buf: 4 << 20, sync: 64 << 20},
		{args: []string{"--buf-size=512KiB", "--sync-bytes", "1G", "/c/t"}, buf: 512 << 10, sync: 1 << 30},
		{env: "1MB", args: []string{"/c/t"}, buf: 1 << 20, sync: 64 << 20},
		{env: "2M", args: []string{"--buf-size", "8M", "/c/t"}, buf: 8 << 20, sync: 64 << 20},
		{args: []string{"--buf-size", "4Q", "/c/t"}, wantErr: `--buf-size "4Q": unknown unit "Q"`},
		{args: []string{"--buf-size", "3G", "/c/t"}, wantErr: `--buf-size "3G": want 1 B to 2.00 GiB`},
		{env: "lots", args: []string{"/c/t"}, wantErr: `SCR_FILE_BUF_SIZE: "lots" is not a byte count`},
	} {
		t.Setenv("SCR_FILE_BUF_SIZE", tc.env)
		var stdout, stderr bytes.Buffer
		if tc.wantErr != "" {
			if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("%s %q: exit %d, stderr %q; want 2 and %q", tc.env, tc.args, code, stderr.String(), tc.wantErr)
			}
			continue
		}
		o, err := parse(tc.args, &stdout)
		if err != nil {
			t.Errorf("%s %q: %v", tc.env, tc.args, err)
			continue
		}
		if int64(o.cfg.Flush.BufSize) != tc.buf || o.cfg.Flush.SyncBytes != tc.sync {
			t.Errorf("%s %q: buf %d sync %d; want %d %d", tc.env, tc.args, o.cfg.Flush.BufSize, o.cfg.Flush.SyncBytes, tc.buf, tc.sync)
		}
	}
}
