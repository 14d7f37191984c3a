package test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/status"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestFlushRecordTimesTheFlush: the daemon records when a flush began (and
// the WRITTEN it started from) with STATE RUNNING, and when it ended with
// FLAG DONE; a single scr-ctl status shows the elapsed time and average
// rate from that record, so far while the flush runs and in all once it
// ended; a later RUN starts a new record.
func TestFlushRecordTimesTheFlush(t *testing.T) {
	testenv.Long(t, "times a throttled flush")
	n := newNode(t)
	a, data := n.checkpoint("flushrec-a.ckpt", 4*mib)
	n.add(a, n.dest("flushrec-a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW) // two seconds of work at least
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	v := n.waitFor("STATE RUNNING and a first commit", settle, func(v transfer.View) bool {
		return v.State == transfer.Running && len(v.Files) == 1 && v.Files[0].Written > 0 && !v.Done
	})
	if v.Flush.Started.IsZero() || v.Flush.Written != 0 || !v.Flush.Ended.IsZero() {
		t.Fatalf("FLUSH record under way: %+v, want STARTED, WRITTEN 0 and no ENDED", v.Flush)
	}
	if late := time.Since(v.Flush.Started); late < 0 || late > settle {
		t.Errorf("FLUSH STARTED %v is not the time of this flush (%v ago)", v.Flush.Started, late)
	}
	first := v.Flush.Started

	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bins.Path(t, testenv.Ctl), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("scr-ctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	jsonStatus := func() status.Report {
		t.Helper()
		var r status.Report
		if out := ctl("status", "--json", n.transfer); json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("status --json:\n%s", out)
		}
		return r
	}
	if v := n.view(); !v.Done {
		if out := ctl("status", n.transfer); !strings.Contains(out, "  flush ") && !n.view().Done {
			t.Errorf("status while the flush runs shows no elapsed time and average so far:\n%s", out)
		}
	}

	n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("flushrec-a.ckpt"), data)
	v = n.view()
	if !v.Flush.Started.Equal(first) || v.Flush.Ended.IsZero() || v.Flush.Ended.Before(first) {
		t.Fatalf("FLUSH record after DONE: %+v, want STARTED %v and an ENDED after it", v.Flush, first)
	}
	out := ctl("status", n.transfer)
	if !strings.HasPrefix(out, "1/1 file  ") || !strings.Contains(out, "  flush took ") || !strings.Contains(out, "/s\n") {
		t.Errorf("status after the flush shows no elapsed time and average:\n%s", out)
	}
	r := jsonStatus()
	if r.Flush == nil || r.Flush.Ended == nil || r.Flush.Written != 4*mib || r.Flush.Average == nil ||
		r.Flush.Elapsed != v.Flush.Ended.Sub(first).Seconds() {
		t.Errorf("status --json flush %+v, want the record's %v and 4 MiB", r.Flush, v.Flush.Ended.Sub(first))
	}
	// The amount of work bounds the time from below: 4 MiB at BW 2 MB/s.
	if el := v.Flush.Ended.Sub(first); el < time.Second {
		t.Errorf("the flush of 4 MiB at %v B/s recorded as taking %v", slowBW, el)
	}
	d.WaitLog("flush complete: FLAG DONE set", settle)

	// A new flush: the library adds a file and asks for RUN (removing DONE).
	b, _ := n.checkpoint("flushrec-b.ckpt", mib)
	n.add(b, n.dest("flushrec-b.ckpt"))
	ended := v.Flush.Ended
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	v = n.waitFor("the second flush's DONE", settle, func(v transfer.View) bool {
		return done(v) && len(v.Files) == 2
	})
	if v.Flush.Started.Before(ended) || v.Flush.Written != 4*mib || v.Flush.Ended.Before(v.Flush.Started) {
		t.Errorf("second FLUSH record %+v: want a STARTED after %v from WRITTEN 4 MiB, and its ENDED", v.Flush, ended)
	}
	if r := jsonStatus(); r.Flush == nil || r.Flush.Written != mib {
		t.Errorf("status --json of the second flush: %+v, want 1 MiB written", r.Flush)
	}
}
