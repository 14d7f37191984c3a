package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// alive returns the daemons of procs still running.
func aliveOf(procs ...*testenv.Process) []*testenv.Process {
	var out []*testenv.Process
	for _, p := range procs {
		if p.Alive() {
			out = append(out, p)
		}
	}
	return out
}

// waitOneServes waits until exactly one of procs runs and fails if that
// does not come to pass within settle. It returns the one.
func waitOneServes(t *testing.T, procs ...*testenv.Process) *testenv.Process {
	t.Helper()
	var one *testenv.Process
	if !testenv.Until(settle, func() bool {
		a := aliveOf(procs...)
		if len(a) == 0 {
			t.Fatal("no daemon serves the transfer file")
		}
		if len(a) == 1 {
			one = a[0]
		}
		return one != nil
	}) {
		t.Fatalf("%d daemons serve one transfer file %v after it was started", len(aliveOf(procs...)), settle)
	}
	return one
}

// TestInstanceLockSurvivesRemoval: a job script's "rm -rf $cntldir/*"
// (or of the control directory itself) under a running daemon, then a
// second daemon started on the same transfer file: exactly one of them may
// go on serving it, and the flush completes byte-exact.
func TestInstanceLockSurvivesRemoval(t *testing.T) {
	cases := []struct {
		name   string
		remove func(t *testing.T, n *node)
	}{
		{"lock file", func(t *testing.T, n *node) { must(t, os.Remove(instance.LockPath(n.transfer))) }},
		{"everything in the control directory", func(t *testing.T, n *node) {
			ents, err := os.ReadDir(filepath.Dir(n.transfer))
			must(t, err)
			for _, e := range ents {
				must(t, os.RemoveAll(filepath.Join(filepath.Dir(n.transfer), e.Name())))
			}
		}},
		{"control directory", func(t *testing.T, n *node) {
			// As rm -rf, racing the daemon that takes its lock again: it
			// may find the directory refilled (ENOTEMPTY), and stops there.
			if err := os.RemoveAll(filepath.Dir(n.transfer)); err != nil {
				t.Logf("removing the control directory: %v", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			src, data := n.checkpoint("a.ckpt", 4*mib)
			n.add(src, n.dest("a.ckpt"))
			n.library(func(tr *hashfile.Tree) {
				transfer.SetBW(tr, slowBW)
				transfer.SetCommand(tr, transfer.Run)
			})
			first := n.start("--sync-interval=100ms")
			n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			tc.remove(t, n)
			second := n.start("--sync-interval=100ms")
			server := waitOneServes(t, first, second)
			loser := first
			if server == first {
				loser = second
			}
			if code := loser.Wait(settle); code != 3 {
				t.Errorf("the daemon that does not serve exited %d, want 3 (another daemon serves the file)", code)
			}
			// The library starts over if its file went with the directory.
			if _, err := os.Stat(n.transfer); err != nil || len(readRaw(t, n.transfer)) == 0 || n.view().Files == nil {
				n.add(src, n.dest("a.ckpt"))
			}
			n.library(func(tr *hashfile.Tree) {
				transfer.SetBW(tr, noLimit)
				transfer.SetCommand(tr, transfer.Run)
			})
			v := n.waitFor("DONE", settle, done)
			checkFlushed(t, v, map[string][]byte{src: data})
			if a := aliveOf(first, second); len(a) != 1 || a[0] != server {
				t.Fatalf("%d daemons serve the transfer file at the end", len(a))
			}
			pid, held, err := instance.Holder(n.transfer)
			must(t, err)
			if !held || pid != server.Pid() {
				t.Fatalf("lock held %v by PID %d, want the serving daemon's %d", held, pid, server.Pid())
			}
		})
	}
}

// fillFS writes to a new file in dir until the file system is full.
func fillFS(t *testing.T, dir string) (free func()) {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	must(t, err)
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	must(t, f.Close())
	return func() { must(t, os.Remove(filler)) }
}

// TestStartsOnFullControlFS: SCR's control base is /dev/shm, which the
// cache fills. A daemon must start there (and restart after a SIGKILL),
// its lock alone excluding a second daemon, and flush once room returns,
// writing its PID then.
func TestStartsOnFullControlFS(t *testing.T) {
	n := newNode(t)
	ctl := filepath.Dir(n.transfer)
	mountTmpfs(t, ctl, 0, "size=64k,mode=0755")
	src, data := n.checkpoint("a.ckpt", 1*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	free := fillFS(t, ctl)
	for round := range 2 {
		d := n.start()
		waitHolder(t, n, d, fmt.Sprintf("round %d: the daemon on a full control file system", round))
		second := n.start()
		if code := second.Wait(settle); code == 0 {
			t.Fatalf("round %d: a second daemon started beside the first on a full control file system", round)
		}
		if !d.Alive() {
			t.Fatalf("round %d: the daemon died", round)
		}
		if round == 0 {
			d.Signal(syscall.SIGKILL)
			d.Wait(settle)
			continue
		}
		free()
		v := n.waitFor("DONE once there is room", settle, done)
		checkFlushed(t, v, map[string][]byte{src: data})
		var says []byte
		if !testenv.Until(settle, func() bool {
			f, err := os.Open(instance.LockPath(n.transfer))
			must(t, err)
			b := make([]byte, 32)
			k, _ := f.Read(b)
			f.Close()
			says = b[:k]
			return strings.TrimSpace(string(says)) == strconv.Itoa(d.Pid())
		}) {
			t.Fatalf("the lock file says %q once there is room, want PID %d", says, d.Pid())
		}
	}
}

// waitHolder waits until d holds the instance lock of n's transfer file,
// as the kernel lists it, failing if d exits first or it takes settle.
func waitHolder(t *testing.T, n *node, d *testenv.Process, what string) {
	t.Helper()
	holds := func() bool {
		pid, held, err := instance.Holder(n.transfer)
		return err == nil && held && pid == d.Pid()
	}
	if !testenv.Until(settle, func() bool { return holds() || !d.Alive() }) || !holds() {
		t.Fatalf("%s never held its instance lock:\n%s", what, d.Log.String())
	}
}

// TestForeignLockFileSaysSo: in a sticky world-writable control directory
// (/dev/shm, /tmp) another user may create the file at the lock's path. The
// daemon must not start on it, and must say whose file it is, whether a
// process of that user holds it, and not name a dead daemon's PID.
func TestForeignLockFileSaysSo(t *testing.T) {
	requireRoot(t)
	n := newNode(t)
	ctl := filepath.Dir(n.transfer)
	must(t, unix.Chmod(ctl, 0o1777))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	must(t, os.Chmod(n.transfer, 0o644))
	lock := instance.LockPath(n.transfer)
	must(t, os.WriteFile(lock, []byte("999999\n"), 0o644)) // a dead daemon's PID
	must(t, os.Chown(lock, nobody, nobody))

	d := n.start()
	if code := d.Wait(settle); code == 0 {
		t.Fatal("the daemon started on another user's lock file")
	}
	if want := "belongs to uid 65534"; !strings.Contains(d.Log.String(), want) {
		t.Fatalf("log does not say %q:\n%s", want, d.Log.String())
	}

	// Held by a live process of that user, who must reach the file.
	for d := ctl; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			must(t, os.Chmod(d, fi.Mode().Perm()|0o001))
		}
	}
	holder := exec.Command("flock", "--exclusive", lock, "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	must(t, holder.Start())
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if !testenv.Until(settle, func() bool { _, held, err := instance.Holder(n.transfer); return err == nil && held }) {
		t.Fatal("the other user's flock never took the lock")
	}
	d = n.start()
	if code := d.Wait(settle); code == 0 {
		t.Fatal("the daemon started on a lock another user holds")
	}
	log := d.Log.String()
	if !strings.Contains(log, "of another user, uid 65534") || strings.Contains(log, "999999") {
		t.Fatalf("log does not name the holding user, or names the dead PID 999999:\n%s", log)
	}
}
