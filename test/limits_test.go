package test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestBadLimitsSaidAlikeByDaemonAndStatus: each BW or PERCENT the daemon
// does not take as written (malformed, below 1 B/s, above 100) gets a
// warning in the daemon's log naming what is in force, and the same
// problem in scr-ctl status, which shows the same limit in force.
func TestBadLimitsSaidAlikeByDaemonAndStatus(t *testing.T) {
	n := newNode(t)
	d := n.start("--log-format=json")
	n.waitFor("STATE STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	for _, tc := range []struct {
		bw, pct   string
		problem   string // in the log's error field and in status
		inForce   string // the log's field with the value in force
		statusHdr string
	}{
		{bw: "52428800", pct: "150.000000", problem: "PERCENT 150.000000 is above 100",
			inForce: `"percent_in_force":"unlimited"`, statusHdr: "BW 50.0 MiB/s  PERCENT unlimited"},
		{bw: "0.500000", pct: "20", problem: "BW 0.500000 is below 1 B/s",
			inForce: `"bw_in_force":1`, statusHdr: "BW 1 B/s  PERCENT 20%"},
		{bw: "banana", pct: "20", problem: `BW \"banana\" is not a number`,
			inForce: `"bw_in_force":1`, statusHdr: "BW (previous value kept, see problem)  PERCENT 20%"},
	} {
		mark := d.LogMark()
		n.library(func(tr *hashfile.Tree) {
			tr.SetValue(transfer.KeyBW, tc.bw)
			tr.SetValue(transfer.KeyPercent, tc.pct)
		})
		line := d.WaitLogAfter(mark, settle, "transfer file value not taken as written", tc.problem)
		if !strings.Contains(line, `"level":"warn"`) || !strings.Contains(line, tc.inForce) {
			t.Errorf("BW %s PERCENT %s: log line %s; want a warning with %s", tc.bw, tc.pct, line, tc.inForce)
		}
		out, err := exec.Command(bins.Path(t, testenv.Ctl), "status", n.transfer).CombinedOutput()
		if err != nil {
			t.Fatalf("scr-ctl status: %v\n%s", err, out)
		}
		want := "problem: " + strings.ReplaceAll(tc.problem, `\"`, `"`)
		if !strings.Contains(string(out), want) || !strings.Contains(string(out), tc.statusHdr) {
			t.Errorf("BW %s PERCENT %s: status\n%s\nwant %q and %q", tc.bw, tc.pct, out, tc.statusHdr, want)
		}
	}
	if c := strings.Count(d.Log.String(), "PERCENT 150.000000 is above 100"); c != 1 {
		t.Errorf("the PERCENT problem logged %d times; want once", c)
	}
}
