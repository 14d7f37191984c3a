package field

import (
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestJournalSeverity: under the shipped system unit, the daemon's lines
// reach journald at their own severity (sd-daemon "<N>" prefixes on the
// journal's stream): the error of a copy that fails is in
// `journalctl -p err`, the start's info line is not, and warnings are at
// PRIORITY=4. Before, every line was recorded at PRIORITY=6.
func TestJournalSeverity(t *testing.T) {
	testenv.Long(t, "the system unit's journal through a flush")
	c := nspawnContainer(t)
	installUnits(t, c)
	j := newUnitJob(t, c)
	c.sh(t, "systemctl", "start", j.unit)
	j.mainPID()
	// A source that does not exist: "copy failed" at error level. A PERCENT
	// above 100: a warning.
	missing := j.cache + "/never-written.ckpt"
	j.scrCtl("add", "--size", "4K", j.transfer, missing, j.dest+"/never-written.ckpt")
	if _, _, err := j.store.Update(func(tr *hashfile.Tree) error {
		tr.SetValue(transfer.KeyPercent, "150")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	j.scrCtl("run", j.transfer)
	j.waitView("the file's ERROR", unitTimeout, func(v transfer.View) bool { return file(v, missing).Error != "" })
	atPriority := func(prio string) string {
		return c.sh(t, "journalctl", "--no-pager", "-o", "cat", "-u", j.unit, "-p", prio+".."+prio)
	}
	var errs, warns, infos string
	if !testenv.UntilEvery(100*time.Millisecond, unitTimeout, func() bool {
		errs, warns, infos = atPriority("err"), atPriority("warning"), atPriority("info")
		return strings.Contains(errs, "copy failed") && strings.Contains(warns, "not taken as written")
	}) {
		t.Fatalf("journal at err:\n%s\nat warning:\n%s\nwant \"copy failed\" and the PERCENT warning; at info:\n%s",
			errs, warns, lastLines(infos, 20))
	}
	if !strings.Contains(infos, `"started"`) {
		t.Errorf("the start's line is not at info:\n%s", lastLines(infos, 20))
	}
	for _, l := range strings.Split(errs+warns, "\n") {
		if strings.Contains(l, `"started"`) {
			t.Errorf("an info line recorded as an error or warning: %s", l)
		}
	}
	for _, l := range strings.Split(errs+warns+infos, "\n") {
		if strings.HasPrefix(l, "<") {
			t.Errorf("journald kept the priority prefix in the message: %s", l)
		}
	}
}
