package test

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestStopUnderPercentSavesProgress stops a flush in the middle of a batch
// (bytes written to the partial copy, none committed yet) while PERCENT
// keeps pausing the copy, once with the library's STOP and once with
// SIGTERM. Either way the daemon must fsync and commit what it copied:
// WRITTEN advances, within the bytes of the partial copy that equal the
// source, and no error is recorded. Batches are made so large and long that
// only the interruption can commit.
func TestStopUnderPercentSavesProgress(t *testing.T) {
	for _, how := range []string{"STOP", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			n := newNode(t)
			src, data := n.checkpoint("p.ckpt", 16*mib)
			dest := n.dest("p.ckpt")
			n.add(src, dest)
			n.library(func(t *hashfile.Tree) {
				transfer.SetPercent(t, 1)
				transfer.SetCommand(t, transfer.Run)
			})
			d := n.start("--verify=off", "--sync-bytes=1073741824", "--sync-interval=1h", "--buf-size=262144")
			// Mid-batch: the partial copy holds bytes, WRITTEN is still 0.
			tmp := flush.TempPath(dest)
			n.waitFor("bytes in the partial copy", settle, func(v transfer.View) bool {
				fi, err := os.Stat(tmp)
				return err == nil && fi.Size() >= 1*mib && v.Files[0].Written == 0
			})
			switch how {
			case "STOP":
				n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Stop) })
				n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
			case "SIGTERM":
				d.Signal(syscall.SIGTERM)
				if code := d.Wait(settle); code != 0 {
					t.Fatalf("daemon exited %d", code)
				}
			}
			f := n.view().Files[0]
			if f.Written == 0 {
				t.Fatalf("after %s mid-batch, WRITTEN is still 0: the copied bytes were not committed (ERROR %q)", how, f.Error)
			}
			if f.Error != "" || strings.Contains(d.Log.String(), "saving progress") {
				t.Fatalf("after %s: ERROR %q; log:\n%s", how, f.Error, d.Log.String())
			}
			durablePrefixOK(t, f, data)
		})
	}
}
