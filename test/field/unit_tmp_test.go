package field

import (
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestSystemdUnitTmpDestinationFails: with PrivateTmp=yes a destination
// under /tmp or /var/tmp was written into the unit's private directory,
// reported complete, and lost when the unit stopped. The shipped unit
// leaves both read-only: the copy must fail with an ERROR saying so, and
// nothing may be reported durable. The instance runs without
// --allow-dest (an instance environment file overrides the site's), so
// that the sandbox, not confinement, decides.
func TestSystemdUnitTmpDestinationFails(t *testing.T) {
	testenv.Long(t, "the system unit with destinations under /tmp")
	c := nspawnContainer(t)
	installUnits(t, c)
	j := newUnitJob(t, c)
	inst := strings.TrimSuffix(strings.TrimPrefix(j.unit, "scr-transferd@"), ".service")
	env := c.path("/etc/scr-transferd/" + inst + ".env")
	if err := os.WriteFile(env, []byte("SCR_TRANSFERD_OPTS=--verify=before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(env) })
	c.sh(t, "systemctl", "start", j.unit)
	cmdline := strings.ReplaceAll(c.sh(t, "cat", "/proc/"+j.mainPID()+"/cmdline"), "\x00", " ")
	if strings.Contains(cmdline, "--allow-dest") {
		t.Fatalf("the instance's environment file did not take effect: %s", cmdline)
	}

	data := make([]byte, 64<<10)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	src := j.cache + "/ckpt"
	if err := os.WriteFile(c.path(src), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(c.path(src), j.uid, j.gid); err != nil {
		t.Fatal(err)
	}
	// One source per destination: the transfer file is keyed by source.
	src2 := j.cache + "/ckpt2"
	if err := os.WriteFile(c.path(src2), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(c.path(src2), j.uid, j.gid); err != nil {
		t.Fatal(err)
	}
	tag := strings.TrimPrefix(j.cntl, "/dev/shm/"+unitUser+"/")
	dests := map[string]string{src: "/tmp/" + tag + "/ckpt", src2: "/var/tmp/" + tag + "/ckpt"}
	for s, d := range dests {
		j.scrCtl("add", j.transfer, s, d)
	}
	t.Cleanup(func() { _, _ = c.try("rm", "-rf", "/tmp/"+tag, "/var/tmp/"+tag) })
	j.scrCtl("run", j.transfer)
	// Until both have an ERROR, or one is (wrongly) complete.
	v := j.waitView("an ERROR for both destinations", unitTimeout, func(v transfer.View) bool {
		a, b := file(v, src), file(v, src2)
		return (a.Error != "" && b.Error != "") || (a.Size > 0 && !a.Pending()) || (b.Size > 0 && !b.Pending())
	})
	for s, d := range dests {
		f := file(v, s)
		if !strings.Contains(f.Error, "read-only file system") {
			t.Errorf("%s: ERROR %q, want it to say read-only file system", d, f.Error)
		}
		if f.Written != 0 || !f.Pending() {
			t.Errorf("%s: WRITTEN %d of %d reported for a destination that cannot be written", d, f.Written, f.Size)
		}
		if _, err := os.Stat(c.path(d)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists in the container's /tmp (%v)", d, err)
		}
	}
	if v.Done {
		t.Error("FLAG DONE set with both files failing")
	}
	t.Logf("ERROR: %s", file(v, src).Error)
}
