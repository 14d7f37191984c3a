package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const (
	settle  = 20 * time.Second // generous bound for conditions on a busy machine
	mib     = 1 << 20
	slowBW  = 2e6 // bytes/s: slow enough to act mid-file
	noLimit = 0
)

func TestRunToDone(t *testing.T) {
	n := newNode(t)
	srcs := map[string][]byte{}
	for i, size := range []int{0, 1, 4095, 3*mib + 17} {
		name := []string{"empty.ckpt", "one.ckpt", "page.ckpt", "big.ckpt"}[i]
		p, data := n.checkpoint(name, size)
		srcs[p] = data
		n.add(p, n.dest(name))
	}
	d := n.start()
	n.waitFor("STATE STOPPED recorded at start", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	if v := n.view(); v.Done || v.Files[0].Written != 0 {
		t.Fatal("the daemon copied before RUN")
	}
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	v := n.waitFor("DONE", settle, done)
	for _, f := range v.Files {
		data := srcs[f.Src]
		sameFile(t, f.Dest, data)
		if f.Written != int64(len(data)) || !f.HasCRC || f.CRC != crcOf(data) || f.Error != "" {
			t.Errorf("%s: WRITTEN %d CRC %#x (has %v) ERROR %q; want %d, %#x", f.Src, f.Written, f.CRC, f.HasCRC, f.Error, len(data), crcOf(data))
		}
		if _, err := os.Stat(flush.TempPath(f.Dest)); !os.IsNotExist(err) {
			t.Errorf("partial copy of %s left behind: %v", f.Dest, err)
		}
	}
	if !d.Alive() {
		t.Fatal("daemon exited after DONE")
	}
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Exit) })
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d after EXIT", code)
	}
	if s := n.view().State; s != transfer.Exiting {
		t.Fatalf("STATE %s after EXIT, want EXITING", s)
	}
}

func TestCreatesControlDirectory(t *testing.T) {
	n := newNode(t)
	n.transfer = filepath.Join(n.root, "new", "ctl", "transfer.scrinfo")
	n.store = hashfile.NewStore(n.transfer, hashfile.Flock)
	n.start("--create-dir")
	n.waitFor("STATE STOPPED in a new control directory", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
}

func TestReactsWithoutPolling(t *testing.T) {
	// With the poll and re-read an hour apart, only file-system
	// notification can deliver the RUN in time.
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 1000)
	n.add(p, n.dest("a.ckpt"))
	n.start("--poll=1h", "--reread=1h")
	n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("a.ckpt"), data)
}

func TestTransferFileRecreated(t *testing.T) {
	n := newNode(t)
	n.start("--poll=1h", "--reread=1h")
	n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	// The library removes the file and starts a new one, under the lock as
	// KVTree writes (open O_CREAT, lock, write): the daemon sees the new
	// file, writes its STATE again and runs the new flush.
	if err := os.Remove(n.transfer); err != nil {
		t.Fatal(err)
	}
	p, data := n.checkpoint("b.ckpt", 5000)
	n.library(func(tr *hashfile.Tree) {
		transfer.AddFile(tr, p, n.dest("b.ckpt"), int64(len(data)))
		transfer.SetCommand(tr, transfer.Run)
	})
	n.waitFor("DONE on the recreated file", settle, done)
	sameFile(t, n.dest("b.ckpt"), data)
}

func TestStopMidFlushThenRunAgain(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, slowBW)
		transfer.SetCommand(t, transfer.Run)
	})
	n.start("--sync-interval=200ms")
	n.waitFor("some bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Stop) })
	v := n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	f := v.Files[0]
	if f.Written >= f.Size || v.Done {
		t.Fatalf("STOP did not stop the flush: WRITTEN %d of %d, DONE %v", f.Written, f.Size, v.Done)
	}
	if _, err := os.Stat(f.Dest); !os.IsNotExist(err) {
		t.Fatal("an incomplete file appeared under its final name")
	}
	durablePrefixOK(t, f, data)
	// Once STOPPED, nothing moves any more.
	stopped := n.view().Files[0].Written
	tmp, err := os.Stat(flush.TempPath(f.Dest))
	if err != nil {
		t.Fatal(err)
	}
	n.library(func(t *hashfile.Tree) { t.SetValue("NOTE", "poke") }) // a change the daemon reads
	n.waitFor("the poke read", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	if w := n.view().Files[0].Written; w != stopped {
		t.Fatalf("WRITTEN moved from %d to %d while STOPPED", stopped, w)
	}
	if tmp2, _ := os.Stat(flush.TempPath(f.Dest)); tmp2.Size() != tmp.Size() {
		t.Fatal("the partial copy grew while STOPPED")
	}
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, noLimit)
		transfer.SetCommand(t, transfer.Run)
	})
	n.waitFor("DONE", settle, done)
	sameFile(t, f.Dest, data)
}

func TestLimitsChangeMidFlush(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 64*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, 256e3) // 262 s for the file at this rate
		transfer.SetPercent(t, 50)
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start("--sync-interval=200ms")
	n.waitFor("some bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	// Lifting the limit must apply to the copy under way: the file then
	// completes within 2 minutes, when the old rate would have needed more
	// than 4 (a generous bound for a loaded machine, not a speed).
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, noLimit)
		transfer.SetPercent(t, 0)
	})
	n.waitFor("DONE after lifting BW", 2*time.Minute, done)
	sameFile(t, n.dest("a.ckpt"), data)
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}

func TestFilesAddedAfterDone(t *testing.T) {
	n := newNode(t)
	p1, d1 := n.checkpoint("one.ckpt", 100000)
	n.add(p1, n.dest("one.ckpt"))
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	n.start()
	n.waitFor("first DONE", settle, done)
	// The next checkpoint: the library removes the old entries, adds the new
	// ones and issues RUN again, which clears DONE.
	p2, d2 := n.checkpoint("two.ckpt", 200000)
	n.library(func(t *hashfile.Tree) {
		t.Unset(transfer.KeyFiles)
		transfer.AddFile(t, p2, filepath.Join(n.pfs, "ckpt.2", "two.ckpt"), int64(len(d2)))
		transfer.SetCommand(t, transfer.Run)
	})
	v := n.waitFor("second DONE", settle, func(v transfer.View) bool { return done(v) && len(v.Files) == 1 && v.Files[0].Src == p2 })
	sameFile(t, v.Files[0].Dest, d2)
	sameFile(t, n.dest("one.ckpt"), d1)
}

func TestKilledMidFileResumes(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 12*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, 4e6)
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	v := n.waitFor("a quarter durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 3*mib })
	d.Signal(syscall.SIGKILL)
	d.Wait(settle)
	v = n.view()
	f := v.Files[0]
	durablePrefixOK(t, f, data)
	if f.Written == 0 || f.Written >= f.Size {
		t.Fatalf("WRITTEN %d after the kill", f.Written)
	}
	n.library(func(t *hashfile.Tree) { transfer.SetBW(t, noLimit) })
	// JSON: the exact byte count (the console writes it in MiB).
	d2 := n.start("--log-format=json")
	d2.WaitLog(`"from":`+strconv.FormatInt(f.Written, 10), settle)
	n.waitFor("DONE after restart", settle, done)
	sameFile(t, f.Dest, data)
	if strings.Contains(d2.Log.String(), "resume impossible") {
		t.Fatalf("the restart did not resume:\n%s", d2.Log.String())
	}
}

func TestSigtermMidFile(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, slowBW)
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d on SIGTERM", code)
	}
	v := n.view()
	if v.State != transfer.Exiting {
		t.Fatalf("STATE %s after SIGTERM", v.State)
	}
	durablePrefixOK(t, v.Files[0], data)
	n.library(func(t *hashfile.Tree) { transfer.SetBW(t, noLimit) })
	n.start()
	n.waitFor("DONE after restart", settle, done)
	sameFile(t, n.dest("a.ckpt"), data)
}

func TestUnknownCommandAndCorruptFile(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 1000)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) { t.SetValue(transfer.KeyCommand, "FLY") })
	d := n.start()
	d.WaitLog(`unknown COMMAND ignored	{"command": "FLY"}`, settle)
	if v := n.view(); v.State != transfer.Stopped || v.Files[0].Written != 0 {
		t.Fatalf("an unknown command changed something: %+v", v)
	}
	// A torn or corrupt transfer file: the daemon says so and keeps going.
	good, err := os.ReadFile(n.transfer)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)-1] ^= 0xff
	writeRaw(t, n.transfer, bad) // under the lock, as a writer would

	d.WaitLog("CRC mismatch", settle)
	if !d.Alive() {
		t.Fatal("daemon died on a corrupt transfer file")
	}
	if b, _ := os.ReadFile(n.transfer); string(b) != string(bad) {
		t.Fatal("the daemon rewrote a transfer file it could not read")
	}
	writeRaw(t, n.transfer, good)
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("a.ckpt"), data)
}
