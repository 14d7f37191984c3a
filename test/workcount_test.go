package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestTransferFileWorkPerFile flushes 1000 small files and counts the
// daemon's locked updates of the transfer file: inotify reports the close
// of every open for writing (IN_CLOSE_WRITE), and the daemon opens it for
// writing for each update, while the test only reads it. Each update
// reads, decodes, and may rewrite the whole file, whose size grows with
// the number of entries; so for the cost of a file not to grow with the
// entry count, the updates must be far fewer than the files: at most one
// per 4 files here, where updating it for every file cost several per file. The bound counts
// work, not time: a slow machine makes more batches (each at most
// --sync-interval long), and the bound leaves room for that.
func TestTransferFileWorkPerFile(t *testing.T) {
	testenv.Long(t, "counts the daemon's work over many files")
	const files = 1000
	n := newNode(t)
	data := n.smallFilesToRun(files, 1024)
	w := watchOpens(t, filepath.Dir(n.transfer))
	d := n.start()
	v := n.waitFor("DONE", settle*4, done)
	checkFlushed(t, v, data)
	updates := w.events(unix.IN_CLOSE_WRITE)[filepath.Base(n.transfer)]
	t.Logf("%d files: %d locked updates of the transfer file", files, updates)
	if updates > files/4 {
		t.Errorf("%d locked updates of the transfer file for %d files: its cost per file grows with the entry count", updates, files)
	}
	if _, err := os.Stat(n.transfer); err != nil || !d.Alive() {
		t.Fatal("daemon died or the transfer file vanished")
	}
}

// smallFilesToRun makes count checkpoints of size bytes, lists them all in
// the transfer file with their destinations and sets COMMAND RUN, in one
// update as the library does; it returns each source's bytes.
func (n *node) smallFilesToRun(count, size int) map[string][]byte {
	data := map[string][]byte{}
	for i := range count {
		p, b := n.checkpoint(fmt.Sprintf("rank%04d.ckpt", i), size)
		data[p] = b
	}
	n.library(func(tr *hashfile.Tree) {
		for p := range data {
			transfer.AddFile(tr, p, n.dest(filepath.Base(p)), int64(size))
		}
		transfer.SetCommand(tr, transfer.Run)
	})
	return data
}

// TestOwnWritesAreNotReadBack: the daemon's loop reads the transfer file
// when it changes, but not when the change is its own. A read that found
// the library's update (COMMAND RUN and the files, in one update as the
// library writes them) and answered it (STATE RUNNING) must not count as
// a change the loop has yet to see: that read back the whole file, under
// its lock, right as the copy began. With notifications the only trigger
// (poll and re-read an hour apart), every read of the loop during a flush
// must then be one that rewrote the file, for something new.
func TestOwnWritesAreNotReadBack(t *testing.T) {
	n := newNode(t)
	d := n.start("--log-level=debug", "--poll=1h", "--reread=1h")
	n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	data := n.smallFilesToRun(50, 1024)
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, data)
	d.WaitLog("flush complete: FLAG DONE set", settle)
	reads := 0
	for line := range strings.Lines(d.Log.String()) {
		if !strings.Contains(line, "transfer file read under its lock") {
			continue
		}
		reads++
		if strings.Contains(line, `"wrote": false`) {
			t.Errorf("the loop read the transfer file back with nothing new in it:\n%s", line)
		}
	}
	if reads < 2 {
		t.Errorf("%d reads of the transfer file logged; RUN and DONE need at least 2", reads)
	}
}
