package test

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/fusetest"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestStopDuringLoneFinalSync: the library sends STOP while a lone large
// file (16 MiB, above the batch threshold) waits on its final fsync, the
// one that makes its unsynced tail durable before it is published, on a
// destination whose fsync hangs (20 s, a PFS client waiting on a stalled
// server). With --sync-bytes above the file's size that fsync carries the
// whole file. The daemon must record STATE STOPPED within stopAnswered,
// far less than the hung fsync, claim nothing it did not make durable
// (WRITTEN below SIZE and covering only bytes of the partial copy equal
// to the source's, no ERROR) and publish nothing at DESTINATION. A RUN
// while that fsync still hangs finds the partial copy locked by it, and
// the ERROR recorded says so rather than blaming another process. Once
// the server recovers, the file is flushed byte for byte.
func TestStopDuringLoneFinalSync(t *testing.T) {
	// With --verify=after the copy fsyncs the file itself before it
	// re-reads it (run.syncFinal); otherwise its Batch's Sync does.
	for _, verify := range []string{"before", "after"} {
		t.Run("verify="+verify, func(t *testing.T) { stopDuringLoneFinalSync(t, "--verify="+verify) })
	}
}

func stopDuringLoneFinalSync(t *testing.T, verify string) {
	n := newNode(t)
	stall := fusetest.NewStall(20 * time.Second)
	stallMount(t, n, stall)
	src, data := n.checkpoint("big.ckpt", 16*mib)
	dest := n.dest("big.ckpt")
	n.add(src, dest)
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	d := n.start("--sync-bytes=67108864", "--sync-interval=1h", verify)
	v := stopWhileStalled(t, n, stall, "the copy's final fsync never reached the destination")
	f := v.Files[0]
	if f.Error != "" {
		t.Errorf("ERROR %q recorded on STOP", f.Error)
	}
	if f.Written >= f.Size {
		t.Errorf("WRITTEN %d recorded while the final fsync was abandoned", f.Written)
	}
	durablePrefixOK(t, f, data)
	if _, err := os.Lstat(dest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("DESTINATION %s published while its fsync was abandoned (%v)", dest, err)
	}
	if !d.Alive() {
		t.Fatal("the daemon exited on STOP")
	}

	// RUN while the abandoned fsync still holds the partial copy's lock:
	// the copy waits, and says the lock is the daemon's own.
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	v = n.waitFor("an ERROR on the locked partial copy", settle, func(v transfer.View) bool { return v.Files[0].Error != "" })
	if msg := v.Files[0].Error; !strings.Contains(msg, "this daemon's own fsync") || strings.Contains(msg, "another process") {
		t.Errorf("ERROR %q: want the lock named as the daemon's own abandoned fsync", msg)
	}

	stall.Set(0) // the server recovers
	v = n.waitFor("DONE after RUN", 3*settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
}
