package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/fusetest"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// stallMount serves a fresh backing directory at n's PFS directory through
// FUSE, every fsync delayed by stall; it is unmounted when the test ends,
// the stall ended first. It fails the test where FUSE is not available
// and CI requires it (CI=true), else skips.
// stopWhileStalled waits until an fsync hangs on stall (failing with
// missing if none does), asks STOP as the library does, and returns the
// view once STOPPED is recorded, failing unless it came within
// stopAnswered: a hung fsync is 20 s.
func stopWhileStalled(t *testing.T, n *node, stall *fusetest.Stall, missing string) transfer.View {
	t.Helper()
	if !testenv.Until(settle, func() bool { now, _ := stall.Waiting(); return now > 0 }) {
		t.Fatalf("%s; transfer file:\n%v", missing, n.view())
	}
	asked := time.Now()
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Stop) })
	v := n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	if took := time.Since(asked); took > stopAnswered {
		t.Errorf("STOP answered after %v, want at most %v (the hung fsync is 20 s)", took.Round(time.Millisecond), stopAnswered)
	}
	return v
}

func stallMount(t *testing.T, n *node, stall *fusetest.Stall) {
	t.Helper()
	if err := fusetest.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing := filepath.Join(n.root, "pfs-backing")
	must(t, os.MkdirAll(backing, 0o755))
	srv, err := fusetest.Mount(backing, n.pfs, fusetest.Options{Stall: stall})
	must(t, err)
	t.Cleanup(func() {
		stall.Set(0)
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
}

// TestStopDuringBatchSync: the library sends STOP while a batch of small
// files is being made durable on a destination whose fsync hangs (20 s
// each, a PFS client waiting on a stalled server; the FUSE client has no
// syncfs, so each file is fsynced). The daemon must record STATE STOPPED
// within stopAnswered, far less than one hung fsync, with nothing of the
// group claimed: no file recorded complete, WRITTEN where it was (0), no
// ERROR, and no file recorded complete whose DESTINATION does not hold its
// source's bytes. Once the server recovers, RUN again flushes every file
// byte for byte.
func TestStopDuringBatchSync(t *testing.T) {
	n := newNode(t)
	stall := fusetest.NewStall(20 * time.Second)
	stallMount(t, n, stall)
	srcs := map[string][]byte{}
	for i := range 40 {
		name := fmt.Sprintf("rank%02d.ckpt", i)
		src, data := n.checkpoint(name, 8<<10)
		srcs[src] = data
		n.add(src, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	d := n.start("--sync-interval=1h")
	v := stopWhileStalled(t, n, stall, "no fsync of the batch reached the destination")
	for _, f := range v.Files {
		if f.Error != "" {
			t.Errorf("%s: ERROR %q recorded on STOP", f.Src, f.Error)
		}
		if f.Written != 0 {
			t.Errorf("%s: WRITTEN %d recorded while its group's sync was abandoned", f.Src, f.Written)
		}
		if f.Written == f.Size {
			if got, err := os.ReadFile(f.Dest); err != nil || !bytes.Equal(got, srcs[f.Src]) {
				t.Errorf("%s recorded complete; DESTINATION does not hold its source's bytes (%v)", f.Src, err)
			}
		}
	}
	if !d.Alive() {
		t.Fatal("the daemon exited on STOP")
	}

	stall.Set(0) // the server recovers
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	v = n.waitFor("DONE after RUN", 3*settle, done)
	checkFlushed(t, v, srcs)
}
