package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandLineMistakes: each mistake gets a message that says what is
// wrong (and how to write it), in at most two lines, and changes nothing
// unless it is only a warning.
func TestCommandLineMistakes(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "t.scrinfo")
	wantCode(t, inproc(context.Background(), "run", "--create", tf), exitOK, "run --create")
	for _, tc := range []struct {
		args []string
		code int
		want string
		bw   float64 // BW after the command, -1: not checked
	}{
		{[]string{"set", tf, "bw", "-5"}, exitUsage, `bw: "-5" is negative`, 0},
		{[]string{"set", tf, "bw", "-5M"}, exitUsage, `bw: "-5M" is negative`, 0},
		{[]string{"set", tf, "bw", "5X"}, exitUsage, `unknown unit "X"`, 0},
		{[]string{"set", tf, "percent", "-5"}, exitUsage, `percent: "-5" is not a number from 0 to 100`, 0},
		{[]string{"set", "bw", tf, "100M"}, exitUsage, "the transfer file comes first: scr-ctl set " + tf + " bw 100M", 0},
		{[]string{"set", tf, "100M", "bw"}, exitUsage, "the setting comes before its value: scr-ctl set " + tf + " bw 100M", 0},
		{[]string{"set", tf, "rate", "1M"}, exitUsage, `unknown setting "rate": want bw or percent`, 0},
		{[]string{"set", tf, "bw", "100"}, exitOK, "warning: bw 100 has no unit, so it means 100 B/s; for 100 MiB/s write 100M", 100},
		{[]string{"set", tf, "bw", "0.5K"}, exitOK, "below 1 KiB/s", 512},
		{[]string{"set", tf, "bw", "100MB"}, exitOK, "", 100 << 20},
		{[]string{"set", tf, "bw", "100MiB"}, exitOK, "", 100 << 20},
		{[]string{"set", tf, "bw", "0.5"}, exitUsage, "bw 0.5: 0.5 B/s is below 1 B/s, the smallest limit; 0 means no limit, and 0.5M means 0.5 MiB/s", 100 << 20},
		{[]string{"set", tf, "percent", "150"}, exitUsage, `percent: "150" is not a number from 0 to 100`, 100 << 20},
		{[]string{"add", "--size=-1", tf, "/c/a", "/p/a"}, exitUsage, `--size "-1" is negative`, -1},
		{[]string{"wait", "--timout", "3s", tf}, exitUsage, "unknown flag --timout; did you mean --timeout?", -1},
		{[]string{"status", "--wath", tf}, exitUsage, "unknown flag --wath; did you mean --watch?", -1},
		{[]string{"wait", "--timeout=abc", tf}, exitUsage, `--timeout "abc": want a duration such as 500ms, 30s, 5m or 1h`, -1},
		{[]string{"wait", "--timeout", "--quiet", tf}, exitUsage, `--timeout "--quiet": want a duration`, -1},
		{[]string{"wait", "--quiet=maybe", tf}, exitUsage, `--quiet "maybe": want true or false`, -1},
		{[]string{"stats", tf}, exitUsage, `unknown command "stats"; did you mean status?`, -1},
		{[]string{"--json", "status", tf}, exitUsage, "flags come after the command", -1},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := inproc(context.Background(), tc.args...)
			wantCode(t, r, tc.code, strings.Join(tc.args, " "))
			if tc.want == "" && r.stderr != "" || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr %q, want %q", r.stderr, tc.want)
			}
			if n := strings.Count(r.stderr, "\n"); n > 2 {
				t.Errorf("%d lines of stderr, want at most 2:\n%s", n, r.stderr)
			}
			if tc.bw >= 0 {
				if v := readView(t, tf); v.BW != tc.bw {
					t.Errorf("BW %v after the command, want %v", v.BW, tc.bw)
				}
			}
		})
	}
}

// TestHelpCommand: scr-ctl help COMMAND prints the command's help to
// stdout, exit status 0.
func TestHelpCommand(t *testing.T) {
	r := inproc(context.Background(), "help", "wait")
	wantCode(t, r, exitOK, "help wait")
	if !strings.HasPrefix(r.stdout, "usage: scr-ctl wait ") || r.stderr != "" {
		t.Fatalf("help wait: %v", r)
	}
}
