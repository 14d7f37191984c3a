package field

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// failedForGood waits until unit has failed and fails the test unless it
// stays down: no restart done or scheduled (ActiveState failed, not
// activating in auto-restart), with the daemon's exit status want.
func failedForGood(t *testing.T, c *container, unit string, want int) map[string]string {
	t.Helper()
	var p map[string]string
	if !testenv.UntilEvery(50*time.Millisecond, unitTimeout, func() bool {
		p = c.show(t, unit, "ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus")
		if p["ActiveState"] != "failed" && p["NRestarts"] != "" && p["NRestarts"] != "0" {
			t.Fatalf("%s restarts on a permanent error: %v", unit, p)
		}
		return p["ActiveState"] == "failed"
	}) {
		t.Fatalf("%s has not failed after %v: %v", unit, unitTimeout, p)
	}
	if p["NRestarts"] != "0" || p["ExecMainStatus"] != strconv.Itoa(want) {
		t.Fatalf("%s failed after %s restarts with exit status %s, want none and exit status %d: %v",
			unit, p["NRestarts"], p["ExecMainStatus"], want, p)
	}
	return p
}

// TestSystemdUnitPermanentErrorStops: under the shipped unit a daemon that
// cannot start for a reason a restart cannot cure (another daemon already
// serves the transfer file; the control directory is another user's)
// fails once and stays failed, instead of Restart=on-failure restarting it
// every RestartSec= for the rest of the job; a bad configuration restarts
// until the unit's start limit, and stays failed then.
func TestSystemdUnitPermanentErrorStops(t *testing.T) {
	testenv.Long(t, "the system unit restarted up to its start limit")
	// Not parallel: a daemon-reload by another test (installUnits) resets
	// systemd's start-limit count, and the test would see more restarts
	// than StartLimitBurst.
	c := nspawnContainer(t)
	installUnits(t, c)

	// Another daemon (here a transient unit of the same user) serves the
	// file first.
	j := newUnitJob(t, c)
	holder := "scr-transferd-holder-" + strings.TrimPrefix(j.cntl, "/dev/shm/"+unitUser+"/scr.") + ".service"
	c.sh(t, "systemd-run", "--unit="+holder, "--uid="+unitUser, "--gid="+unitUser, "--property=Type=notify",
		"/usr/local/bin/scr-transferd", "--log-format=json", j.transfer)
	t.Cleanup(func() { _, _ = c.try("systemctl", "stop", holder) })
	if _, err := c.try("systemctl", "start", j.unit); err == nil {
		t.Fatalf("systemctl start %s succeeded beside another daemon on the same file", j.unit)
	}
	failedForGood(t, c, j.unit, 3)
	if journal := c.journal(t, j.unit); !strings.Contains(journal, "already served") {
		t.Errorf("the unit's journal does not say the file is already served:\n%s", lastLines(journal, 20))
	}
	if st := c.show(t, holder, "ActiveState")["ActiveState"]; st != "active" {
		t.Errorf("the first daemon is %s, want still active", st)
	}

	// The control directory belongs to another user than the job's.
	k := newUnitJob(t, c)
	c.sh(t, "chown", otherUser+":"+otherUser, k.cntl)
	if _, err := c.try("systemctl", "start", k.unit); err == nil {
		t.Fatalf("systemctl start %s succeeded on %s's control directory", k.unit, otherUser)
	}
	failedForGood(t, c, k.unit, 4)

	// A bad configuration (exit status 2, as a crash's, which must
	// restart): the start limit ends the restarts.
	l := newUnitJob(t, c)
	inst := strings.TrimSuffix(strings.TrimPrefix(l.unit, "scr-transferd@"), ".service")
	env := c.path("/etc/scr-transferd/" + inst + ".env")
	if err := os.WriteFile(env, []byte("SCR_TRANSFERD_OPTS=--nice=99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(env) })
	_, _ = c.try("systemctl", "start", l.unit)
	burst := c.show(t, l.unit, "StartLimitBurst")["StartLimitBurst"]
	var p map[string]string
	if !testenv.UntilEvery(100*time.Millisecond, unitTimeout, func() bool {
		// Between restarts the unit is activating (auto-restart); failed
		// is final.
		p = c.show(t, l.unit, "ActiveState", "Result", "NRestarts")
		return p["ActiveState"] == "failed"
	}) {
		t.Fatalf("%s with a bad configuration did not reach its start limit within %v: %v", l.unit, unitTimeout, p)
	}
	if p["NRestarts"] != burst {
		t.Errorf("%s failed for good after %s restarts, want StartLimitBurst=%s: %v", l.unit, p["NRestarts"], burst, p)
	}
	if j := c.journal(t, l.unit); !strings.Contains(j, "Start request repeated too quickly") {
		t.Errorf("the journal does not say the start limit was hit:\n%s", lastLines(j, 10))
	}
}
