package status

import (
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestLimitsAsTheDaemonReadsThem: status shows the BW and PERCENT in
// force as the daemon reads them (transfer.ReadLimits) and lists every
// value not taken as written as a problem: a BW below 1 B/s is 1 B/s (not
// "0 B/s"), a malformed BW keeps the previous limit (not "unlimited"), a
// PERCENT above 100 is no limit.
func TestLimitsAsTheDaemonReadsThem(t *testing.T) {
	for _, tc := range []struct {
		bw, pct  string
		header   string // in the text form
		problems []string
	}{
		{bw: "52428800.000000", pct: "20", header: "BW 50.0 MiB/s  PERCENT 20%"},
		{bw: "0.500000", header: "BW 1 B/s  PERCENT unlimited", problems: []string{"BW 0.500000 is below 1 B/s"}},
		{bw: "banana", header: "BW (previous value kept, see problem)",
			problems: []string{`BW "banana" is not a number; the limit in force before stays in force`}},
		{pct: "150.000000", header: "PERCENT unlimited", problems: []string{"PERCENT 150.000000 is above 100: 100 (no limit on the time spent copying) is in force"}},
	} {
		tr := hashfile.New()
		if tc.bw != "" {
			tr.SetValue(transfer.KeyBW, tc.bw)
		}
		if tc.pct != "" {
			tr.SetValue(transfer.KeyPercent, tc.pct)
		}
		r := Build("/ctl/transfer.scrinfo", time.Unix(1.8e9, 0), tr, nil)
		text := Render(r, Layout{})
		if !strings.Contains(text, tc.header) {
			t.Errorf("BW %q PERCENT %q: text\n%s\nwant %q", tc.bw, tc.pct, text, tc.header)
		}
		if len(r.Problems) != len(tc.problems) {
			t.Fatalf("BW %q PERCENT %q: problems %q; want %d", tc.bw, tc.pct, r.Problems, len(tc.problems))
		}
		for i, want := range tc.problems {
			if !strings.Contains(r.Problems[i], want) || !strings.Contains(text, "problem: "+r.Problems[i]) {
				t.Errorf("problem %q (text\n%s); want it listed, containing %q", r.Problems[i], text, want)
			}
		}
	}
}
