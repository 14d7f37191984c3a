package test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// stopAnswered bounds how long STOP may take to be answered (STATE STOPPED
// recorded) on a slow destination: generous for a loaded machine, far
// below the fsync of the unsynced bytes (over 8 s here), which STOP used
// to wait for. SCR_Finalize sends STOP and waits for STOPPED.
const stopAnswered = 5 * time.Second

// TestStopOnSlowDestination: the library sends STOP while a large file is
// copied to a destination whose fsync drains the bytes written since the
// last one at 1 MiB/s, with 8 MiB or more written and not yet synced. The
// daemon must record STATE STOPPED within stopAnswered, keep the progress
// already durable and claim nothing more: WRITTEN covers only bytes of the
// partial copy that equal the source's, and no ERROR is recorded.
func TestStopOnSlowDestination(t *testing.T) {
	n := newNode(t)
	slowSyncMount(t, filepath.Join(n.root, "pfs-backing"), n.pfs, 1<<20)
	src, data := n.checkpoint("big.ckpt", 32*mib)
	dest := n.dest("big.ckpt")
	n.add(src, dest)
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 8e6) // the copy lasts about 4 s
		transfer.SetCommand(tr, transfer.Run)
	})
	n.start("--sync-bytes=1073741824", "--sync-interval=1h")
	partial := flush.TempPath(dest)
	n.waitFor("8 MiB in the partial copy", settle, func(transfer.View) bool {
		fi, err := os.Stat(partial)
		return err == nil && fi.Size() >= 8*mib
	})
	asked := time.Now()
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Stop) })
	v := n.waitFor("STOPPED", settle+time.Minute, func(v transfer.View) bool { return v.State == transfer.Stopped })
	if took := time.Since(asked); took > stopAnswered {
		t.Errorf("STOP answered after %v, want at most %v", took.Round(time.Millisecond), stopAnswered)
	}
	f := v.Files[0]
	if f.Error != "" {
		t.Errorf("ERROR %q recorded on STOP", f.Error)
	}
	if f.Written >= f.Size {
		t.Fatalf("WRITTEN %d: the copy was not stopped mid-file", f.Written)
	}
	durablePrefixOK(t, f, data)
}
