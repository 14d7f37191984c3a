package transfer

import (
	"math"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// TestReadLimits checks the one reading of BW and PERCENT: what is in
// force, and a problem naming the value and what is in force instead for
// every value out of range or unusable.
func TestReadLimits(t *testing.T) {
	for _, tc := range []struct {
		name, bw, pct   string
		wantBW, wantPct float64
		bwKept, pctKept bool
		problems        []string // substrings, one per problem in order
	}{
		{name: "absent", wantBW: 0, wantPct: 0},
		{name: "library's form", bw: "52428800.000000", pct: "20.000000", wantBW: 52428800, wantPct: 20},
		{name: "zero is unlimited", bw: "0.000000", pct: "0", wantBW: 0, wantPct: 0},
		{name: "exactly the bounds", bw: "1", pct: "100", wantBW: 1, wantPct: 100},
		{name: "bw below 1 B/s", bw: "0.500000", wantBW: MinBW,
			problems: []string{`BW 0.500000 is below 1 B/s (0 means no limit): 1 B/s is in force`}},
		{name: "bw malformed", bw: "banana", wantBW: 0, bwKept: true,
			problems: []string{`BW "banana" is not a number; the limit in force before stays in force`}},
		{name: "bw negative", bw: "-5", bwKept: true, problems: []string{`BW "-5" is not a non-negative number`}},
		{name: "bw infinite", bw: "inf", bwKept: true, problems: []string{`BW "inf" is not a non-negative number`}},
		{name: "percent above 100", pct: "150.000000", wantPct: MaxPercent,
			problems: []string{"PERCENT 150.000000 is above 100: 100 (no limit on the time spent copying) is in force"}},
		{name: "percent malformed", pct: "half", pctKept: true,
			problems: []string{`PERCENT "half" is not a number; the limit in force before stays in force`}},
		{name: "both bad", bw: "0.1", pct: "x", wantBW: 1, pctKept: true,
			problems: []string{"BW 0.1 is below 1 B/s", `PERCENT "x" is not a number`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ReadLimits(tc.bw, tc.pct)
			if l.BW != tc.wantBW || l.Percent != tc.wantPct || l.BWKept != tc.bwKept || l.PercentKept != tc.pctKept {
				t.Errorf("ReadLimits(%q, %q) = BW %v kept %v, PERCENT %v kept %v; want %v %v, %v %v",
					tc.bw, tc.pct, l.BW, l.BWKept, l.Percent, l.PercentKept, tc.wantBW, tc.bwKept, tc.wantPct, tc.pctKept)
			}
			if len(l.Problems) != len(tc.problems) {
				t.Fatalf("problems %v; want %d", l.Problems, len(tc.problems))
			}
			for i, want := range tc.problems {
				if !strings.Contains(l.Problems[i].Error(), want) {
					t.Errorf("problem %d: %q; want it to contain %q", i, l.Problems[i], want)
				}
			}
		})
	}
}

// TestReadLimitsInView checks that Read reports the limits as ReadLimits
// reads them, including a key with several values.
func TestReadLimitsInView(t *testing.T) {
	tree, err := hashfile.Parse(strings.NewReader("BW\n  0.500000\nPERCENT\n  150\n  20\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := Read(tree)
	if v.BW != MinBW || v.BWBad || !v.PercentBad || len(v.Problems) != 2 {
		t.Fatalf("BW %v bad %v, PERCENT bad %v, problems %v", v.BW, v.BWBad, v.PercentBad, v.Problems)
	}
	if !strings.Contains(v.Problems[1].Error(), "PERCENT: want one value, found 2") {
		t.Errorf("problem %q", v.Problems[1])
	}
}

// FuzzReadLimits reads any pair of values: what is in force is always a
// usable limit (finite, BW 0 or at least MinBW, PERCENT 0 to MaxPercent),
// and a value read differently from how it is written comes with a problem.
func FuzzReadLimits(f *testing.F) {
	for _, s := range []string{"", "0", "0.5", "52428800.000000", "banana", "-1", "1e400", "NaN", "150", " 7 "} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, bw, pct string) {
		l := ReadLimits(bw, pct)
		if math.IsNaN(l.BW) || math.IsInf(l.BW, 0) || l.BW < 0 || l.BW > 0 && l.BW < MinBW {
			t.Fatalf("BW %q: %v in force", bw, l.BW)
		}
		if math.IsNaN(l.Percent) || l.Percent < 0 || l.Percent > MaxPercent {
			t.Fatalf("PERCENT %q: %v in force", pct, l.Percent)
		}
		if (l.BWKept || l.PercentKept) && len(l.Problems) == 0 {
			t.Fatalf("%q %q: value kept without a problem", bw, pct)
		}
	})
}
