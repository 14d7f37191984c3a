package main

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestHelpFlags: the flags are read from both daemons' --help styles, the
// redesigned one's "  --name ARG" and the older "  -name type" of Go's flag
// package, and nothing else of the text is taken for a flag.
func TestHelpFlags(t *testing.T) {
	for _, tc := range []struct {
		name, help string
		want       []string
	}{
		{"double dash", "usage: scr-transferd [flags] TRANSFERFILE\n\nFlags:\n  --create-dir\n        create the directory\n  --buf-size SIZE\n        bytes (default 1M)\n", []string{"buf-size", "create-dir"}},
		{"single dash", "Flags:\n  -allow-dest value\n    \tonly write under DIR\n  -sync-each\n    \tan fsync per file, with --locking=fcntl\n", []string{"allow-dest", "sync-each"}},
		{"prose mentioning flags", "Flags may come before or after TRANSFERFILE; -- ends them.\n    --verify=before is the default\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := helpFlags(tc.help)
			if len(got) != len(tc.want) {
				t.Fatalf("helpFlags = %v, want %v", got, tc.want)
			}
			for _, f := range tc.want {
				if !got[f] {
					t.Errorf("helpFlags = %v, lacks %s", got, f)
				}
			}
		})
	}
}

// TestCheckFlags: a section's flag the binary does not list is refused,
// naming the flag, with errUnknownFlag, so that an older daemon is never
// started with a flag it would reject or misread.
func TestCheckFlags(t *testing.T) {
	old := daemonBin{name: "old (3fa05f5)", path: "/x/scr-transferd", flags: map[string]bool{"verify": true, "streams": true}}
	for _, tc := range []struct {
		args []string
		bad  string // the flag named in the error, "" for none
	}{
		{nil, ""},
		{[]string{"--verify=before"}, ""},
		{[]string{"-streams", "4"}, ""},
		{[]string{"--create-dir"}, "--create-dir"},
		{[]string{"--verify=before", "--bw=auto"}, "--bw"},
	} {
		err := old.check(tc.args)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("check(%q) = %v, want nil", tc.args, err)
		case tc.bad != "" && (!errors.Is(err, errUnknownFlag) || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), "3fa05f5")):
			t.Errorf("check(%q) = %v, want errUnknownFlag naming %s and the binary", tc.args, err, tc.bad)
		}
	}
}

// TestVerdict: a new figure holds when within 10 % of the old one or
// better than it in the figure's sense; a worse one closer to the old than
// the measurement resolves is reported as not resolved, not as held.
func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        figure
		old, new float64
		want     outcome
	}{
		{"higher: 9 % worse", figure{sense: higher}, 1.00, 0.91, held},
		{"higher: 11 % worse", figure{sense: higher}, 1.00, 0.89, worse},
		{"higher: better by far", figure{sense: higher}, 1.00, 2.00, held},
		{"lower: 9 % worse", figure{sense: lower}, 10, 10.9, held},
		{"lower: 20 % worse", figure{sense: lower}, 10, 12, worse},
		{"lower: better by far", figure{sense: lower}, 10, 2, held},
		{"lower: both 0", figure{sense: lower}, 0, 0, held},
		{"lower: old 0, new above", figure{sense: lower}, 0, 0.01, worse},
		{"lower: old 0, within resolution", figure{sense: lower, resolution: 0.017}, 0, 0.0167, unresolved},
		{"lower: tripled but within resolution", figure{sense: lower, resolution: 1}, 0.3, 0.9, unresolved},
		{"lower: worse beyond resolution", figure{sense: lower, resolution: 1}, 3, 4.5, worse},
		{"near: further from the target by 12 %", figure{sense: near, target: 1}, 1.0, 1.12, worse},
		{"near: closer to the target", figure{sense: near, target: 5}, 6.0, 5.2, held},
		{"near: below the target, within 10 %", figure{sense: near, target: 1}, 1.0, 0.95, held},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdict(tc.f, tc.old, tc.new); got != tc.want {
				t.Errorf("verdict(%+v, old %v, new %v) = %v, want %v", tc.f, tc.old, tc.new, got, tc.want)
			}
		})
	}
}

// TestCompareFigures: goals are paired by name in the order first
// measured, each side's value is the median of its rounds, and a goal one
// side did not measure is named rather than compared.
func TestCompareFigures(t *testing.T) {
	fig := func(goal string, v float64) figure { return figure{goal: goal, unit: "×", value: v, sense: higher} }
	old := []figure{fig("a", 1.0), fig("b", 10), fig("a", 3.0), fig("b", 20), fig("a", 2.0), fig("only old", 1)}
	new := []figure{fig("b", 15), fig("a", 1.5), fig("b", 15), fig("a", 1.9), fig("a", 1.7), fig("only new", 1)}
	rows, missing := compareFigures(old, new)
	want := []row{
		{goal: "a", unit: "×", old: 2.0, new: 1.7, ratio: 1.7 / 2.0, outcome: worse},
		{goal: "b", unit: "×", old: 20, new: 15, ratio: 15.0 / 20, outcome: worse},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows = %+v, want %+v", rows, want)
	}
	if !reflect.DeepEqual(missing, []string{"only old", "only new"}) {
		t.Errorf("missing = %q", missing)
	}
	rows, _ = compareFigures([]figure{{goal: "z", sense: lower}}, []figure{{goal: "z", value: 1, sense: lower}})
	if len(rows) != 1 || !math.IsNaN(rows[0].ratio) || rows[0].outcome != worse {
		t.Errorf("old 0, new 1 (lower is better): %+v, want ratio NaN, worse", rows)
	}
}

// TestTickShare: two readings of CPU time in 10 ms ticks over 10 s
// resolve 0.2 % of a core.
func TestTickShare(t *testing.T) {
	if got := tickShare(10 * time.Second); math.Abs(got-0.2) > 1e-9 {
		t.Errorf("tickShare(10s) = %v, want 0.2", got)
	}
}

// FuzzHelpFlags: every flag helpFlags returns begins a line of the text,
// indented by two spaces, after one or two dashes.
func FuzzHelpFlags(f *testing.F) {
	f.Add("Flags:\n  --create-dir\n        create it\n  -sync-each\n")
	f.Add("  --\n  -\n  --a-b=1\n\n  ---x\n")
	f.Fuzz(func(t *testing.T, help string) {
		for name := range helpFlags(help) {
			if !strings.HasPrefix(help, "  -"+name) && !strings.HasPrefix(help, "  --"+name) &&
				!strings.Contains(help, "\n  -"+name) && !strings.Contains(help, "\n  --"+name) {
				t.Errorf("helpFlags(%q) returned %q, which no line begins with", help, name)
			}
		}
	})
}
