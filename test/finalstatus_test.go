package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestFinalStatusCountsTheLastCommit: the commit a SIGTERM makes is the
// last thing the daemon records; the last STATUS= (what the last metrics
// are made of) and the last log line must count it.
func TestFinalStatusCountsTheLastCommit(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	sock := filepath.Join(n.root, "notify.sock")
	notes := notifySocket(t, sock)
	// Batches too large to end before the signal: the only commit is the
	// one the signal makes.
	d := n.startEnv([]string{"NOTIFY_SOCKET=" + sock}, "--sync-interval=1h", "--sync-bytes=1073741824", "--log-format=json")
	partial := flush.TempPath(n.dest("a.ckpt"))
	testenv.WaitFor(t, "the partial copy to reach 256 KiB", settle, func() bool {
		fi, err := os.Stat(partial)
		return err == nil && fi.Size() >= 256<<10
	})
	if w := n.view().Files[0].Written; w != 0 {
		t.Fatalf("WRITTEN %d recorded before the signal; the test needs the signal's commit to be the only one", w)
	}
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	w := n.view().Files[0].Written
	if w < 256<<10 {
		t.Fatalf("WRITTEN %d after SIGTERM: the copied bytes were not committed", w)
	}
	want := fmt.Sprintf("%s pending", units.IEC(float64(int64(len(data))-w)))
	final := awaitNote(t, notes, "the final STATUS=", func(m string) bool {
		return strings.HasPrefix(m, "STATUS=") && strings.Contains(m, string(transfer.Exiting))
	})
	if !strings.Contains(final, want) {
		t.Errorf("final %q, want %q (WRITTEN %d of %d)", final, want, w, len(data))
	}
	d.WaitLogAfter(0, settle, `"msg":"stopped"`, fmt.Sprintf(`"bytes_durable":%d`, w))
}
