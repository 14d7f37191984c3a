package test

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestSecondDaemonRefused: a second daemon on the same transfer file exits
// non-zero at once naming the first, and the lock of a SIGKILLed daemon is
// released so that a restart takes over and resumes.
func TestSecondDaemonRefused(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	first := n.start("--sync-interval=100ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })

	second := n.start()
	if code := second.Wait(settle); code == 0 {
		t.Fatal("a second daemon on the same transfer file exited 0")
	}
	want := fmt.Sprintf("already served by PID %d (lock %s)", first.Pid(), instance.LockPath(n.transfer))
	if !strings.Contains(second.Log.String(), want) {
		t.Fatalf("second daemon's log does not say %q:\n%s", want, second.Log.String())
	}
	if !first.Alive() {
		t.Fatal("the first daemon died")
	}

	first.Signal(syscall.SIGKILL)
	first.Wait(settle)
	f := n.view().Files[0]
	durablePrefixOK(t, f, data)
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	// JSON: the exact byte count (the console writes it in MiB).
	third := n.start("--log-format=json")
	third.WaitLog(`"from":`+strconv.FormatInt(f.Written, 10), settle)
	v := n.waitFor("DONE after the restart", settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
}

// TestLateSecondDaemonCannotCorrupt: a second daemon started while the
// first is mid-flush (a job script run twice, srun beside the unit) must
// not touch the partial copies or the transfer file; after the first is
// SIGKILLed mid-copy and restarted, every complete file is identical to
// its source.
func TestLateSecondDaemonCannotCorrupt(t *testing.T) {
	n := newNode(t)
	srcs := map[string][]byte{}
	for i := range 3 {
		name := fmt.Sprintf("r%d.ckpt", i)
		p, data := n.checkpoint(name, 6*mib)
		srcs[p] = data
		n.add(p, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 4e6)
		transfer.SetCommand(tr, transfer.Run)
	})
	first := n.start("--sync-interval=100ms")
	n.waitFor("one file complete and the next begun", settle, func(v transfer.View) bool {
		complete, begun := 0, 0
		for _, f := range v.Files {
			if f.Written == f.Size {
				complete++
			} else if f.Written > 0 {
				begun++
			}
		}
		return complete >= 1 && begun >= 1
	})
	late := n.start("--sync-interval=100ms")
	if code := late.Wait(settle); code == 0 {
		t.Fatal("a late second daemon exited 0")
	}
	if !strings.Contains(late.Log.String(), "already served by PID "+strconv.Itoa(first.Pid())) {
		t.Fatalf("late daemon's log:\n%s", late.Log.String())
	}
	first.Signal(syscall.SIGKILL)
	first.Wait(settle)
	v := n.view()
	for _, f := range v.Files {
		durablePrefixOK(t, f, srcs[f.Src])
		if f.Written == f.Size {
			sameFile(t, f.Dest, srcs[f.Src])
		}
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	n.start()
	v = n.waitFor("DONE after the restart", settle, done)
	checkFlushed(t, v, srcs)
}
