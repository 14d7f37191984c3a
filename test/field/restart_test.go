package field

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// failedForGood waits until unit has failed and fails the test unless it
// stays down: no restart done or scheduled (ActiveState failed, not
// activating in auto-restart), with the daemon's exit status want.
func failedForGood(t *testing.T, c *container, unit string, want int) map[string]string {
	t.Helper()
	deadline := time.Now().Add(unitTimeout)
	for {
		p := c.show(t, unit, "ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus")
		if p["ActiveState"] == "failed" {
			if p["NRestarts"] != "0" || p["ExecMainStatus"] != strconv.Itoa(want) {
				t.Fatalf("%s failed after %s restarts with exit status %s, want none and exit status %d: %v",
					unit, p["NRestarts"], p["ExecMainStatus"], want, p)
			}
			return p
		}
		if p["NRestarts"] != "" && p["NRestarts"] != "0" {
			t.Fatalf("%s restarts on a permanent error: %v", unit, p)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not failed after %v: %v", unit, unitTimeout, p)
		}
		time.Sleep(50 * time.Millisecond) // polling the unit's state
	}
}

// TestSystemdUnitPermanentErrorStops: under the shipped unit a daemon that
// cannot start for a reason a restart cannot cure (another daemon already
// serves the transfer file; the control directory is another user's)
// fails once and stays failed, instead of Restart=on-failure restarting it
// every RestartSec= for the rest of the job; the unit's start limit bounds
// every other failure.
func TestSystemdUnitPermanentErrorStops(t *testing.T) {
	t.Parallel()
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

	// Any other failure: bounded by the start limit.
	p := c.show(t, k.unit, "StartLimitBurst", "StartLimitIntervalUSec")
	if p["StartLimitBurst"] == "" || p["StartLimitBurst"] == "0" || p["StartLimitIntervalUSec"] == "0" {
		t.Errorf("no start limit on the unit: %v", p)
	}
	if _, err := os.Stat(c.path("/etc/systemd/system/multi-user.target.wants/" + k.unit)); err == nil {
		t.Errorf("the instance is enabled at boot")
	}
}
