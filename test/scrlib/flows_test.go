package scrlib

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const (
	mib   = 1 << 20
	ranks = 3
)

// TestFlushAndRestart: in both builds, an application writes four
// checkpoints with SCR_FLUSH_ASYNC=1; the daemon flushes each; every byte
// of every checkpoint on the file system is the application's, and a new
// job restarts from the newest one and finds every byte right.
func TestFlushAndRestart(t *testing.T) {
	for _, locking := range []string{"flock", "fcntl"} {
		t.Run(locking, func(t *testing.T) {
			j := newJob(t, build(t, locking))
			d := j.startDaemon(0o022)
			const ckpts, size = 4, 2 * mib
			j.app(ranks, 0o022, []string{"SCR_FLUSH_ASYNC=1", "SCR_FLUSH_ASYNC_BW=209715200"},
				"write", fmt.Sprint(ckpts), fmt.Sprint(size), "400").wait(t)
			for c := 1; c <= ckpts; c++ {
				j.checkPFS(ranks, c, size)
			}
			// The library flushes the last checkpoint itself if the daemon
			// has not finished it by SCR_Finalize: the others are the daemon's.
			if n := flushes(d.Logs()); n < ckpts-1 {
				t.Fatalf("the daemon completed %d flushes, want at least %d", n, ckpts-1)
			}
			noErrors(t, d)
			if code := stop(d); code != 0 {
				t.Fatalf("daemon exit status %d on SIGTERM", code)
			}
			j.restart(ranks, ckpts)
		})
	}
}

// TestKillDaemonMidFlush: the daemon is killed with SIGKILL in the middle
// of a flush (some bytes recorded, not all); a new daemon resumes it while
// the application computes, the flush completes through the daemon, and
// the bytes on the file system are the application's.
func TestKillDaemonMidFlush(t *testing.T) {
	j := newJob(t, build(t, "flock"))
	d := j.startDaemon(0o022, "--sync-interval=250ms")
	const size = 8 * mib
	// Checkpoint 1 flushes at 4 MiB/s on this node (24 MiB: 6 s) while
	// the application computes for 12 s; checkpoint 2 then waits for it.
	r := j.app(ranks, 0o022, []string{"SCR_FLUSH_ASYNC=1", fmt.Sprint("SCR_FLUSH_ASYNC_BW=", 4*mib)},
		"write", "2", fmt.Sprint(size), "12000")
	v := j.waitFor("a file partly recorded", func(v transfer.View) bool {
		for _, f := range v.Files {
			if f.Written > 0 && f.Written < f.Size {
				return true
			}
		}
		return false
	})
	kill(d)
	_, before := v.Totals()
	t.Logf("killed with %d bytes recorded", before)
	d2 := j.startDaemon(0o022, "--sync-interval=250ms")
	r.wait(t)
	j.checkPFS(ranks, 1, size)
	j.checkPFS(ranks, 2, size)
	log := d2.Logs()
	if flushes(log) < 1 {
		t.Fatalf("the new daemon completed no flush:\n%s", log)
	}
	if !strings.Contains(log, `"from": "`) || strings.Count(log, `"from": "0 B"`) == strings.Count(log, "\tcopy\t") {
		t.Fatalf("the new daemon resumed no partial copy:\n%s", log)
	}
	noErrors(t, d2)
}

// TestUmask002: a site's umask 002 for the daemon and the job: the
// library recreates the transfer file group-writable (0664), the daemon
// keeps serving it, flushes and restart are whole, and nothing the daemon
// creates is writable by others.
func TestUmask002(t *testing.T) {
	j := newJob(t, build(t, "flock"))
	d := j.startDaemon(0o002)
	const ckpts, size = 2, mib
	j.app(ranks, 0o002, []string{"SCR_FLUSH_ASYNC=1"}, "write", fmt.Sprint(ckpts), fmt.Sprint(size), "400").wait(t)
	fi, err := os.Stat(j.transfer)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o664 {
		t.Fatalf("transfer file mode %v, want 0664 as the library creates it under umask 002", fi.Mode().Perm())
	}
	for c := 1; c <= ckpts; c++ {
		j.checkPFS(ranks, c, size)
		for r := range ranks {
			p := filepath.Join(j.pfs, fmt.Sprintf("c%d.rank_%d.ckpt", c, r))
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o002 != 0 {
				t.Fatalf("%s: %v, mode %v: writable by others", p, err, fi.Mode())
			}
		}
	}
	if n := flushes(d.Logs()); n < ckpts-1 {
		t.Fatalf("the daemon completed %d flushes, want at least %d", n, ckpts-1)
	}
	noErrors(t, d)
	j.restart(ranks, ckpts)
}

// TestFinalizeDuringFlush: SCR_Finalize while the daemon flushes the last
// checkpoint: the library stops the daemon, clears FILES and flushes the
// checkpoint itself to the same destinations. No partial copy of the
// daemon is left, the files are whole, and the transfer file records
// nothing wrong (no ERROR, no FILES left, STATE STOPPED).
func TestFinalizeDuringFlush(t *testing.T) {
	j := newJob(t, build(t, "flock"))
	d := j.startDaemon(0o022, "--sync-interval=250ms")
	const size = 8 * mib
	r := j.app(ranks, 0o022, []string{"SCR_FLUSH_ASYNC=1", fmt.Sprint("SCR_FLUSH_ASYNC_BW=", 2*mib)},
		"write", "1", fmt.Sprint(size), "1500")
	r.wait(t)
	log := d.Logs()
	if !strings.Contains(log, "\tcopy\t") {
		t.Fatalf("the daemon never began the flush:\n%s", log)
	}
	j.checkPFS(ranks, 1, size)
	entries, err := os.ReadDir(j.pfs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if flush.IsPartialName(filepath.Join(j.pfs, name)) || name != ".scr" && !strings.HasSuffix(name, ".ckpt") {
			t.Fatalf("left in the prefix: %s", name)
		}
	}
	v := j.waitFor("STATE STOPPED", func(v transfer.View) bool { return v.State == transfer.Stopped })
	if len(v.Files) != 0 {
		t.Fatalf("FILES left in the transfer file: %+v", v.Files)
	}
	noErrors(t, d)
}

// TestFcntlRepeated: the FCNTL build, whose library fails (and hangs) on a
// busy lock, flushes through the daemon run after run: no lock failure, no
// hang, every byte right.
func TestFcntlRepeated(t *testing.T) {
	b := build(t, "fcntl")
	runs := 4
	if testing.Short() {
		runs = 1
	}
	for i := range runs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			j := newJob(t, b)
			d := j.startDaemon(0o022)
			const ckpts, size = 3, mib
			j.app(2, 0o022, []string{"SCR_FLUSH_ASYNC=1", "SCR_FLUSH_ASYNC_BW=104857600"},
				"write", fmt.Sprint(ckpts), fmt.Sprint(size), "300").wait(t)
			for c := 1; c <= ckpts; c++ {
				j.checkPFS(2, c, size)
			}
			noErrors(t, d)
		})
	}
}
