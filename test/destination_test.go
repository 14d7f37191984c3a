package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestDestinationDirectoryMoved: the destination directory renamed away and
// recreated mid-copy. The copy must not be published in the moved
// directory and reported complete at a path where nothing is: the daemon
// says the directory moved and copies the file again into the new one.
func TestDestinationDirectoryMoved(t *testing.T) {
	for _, confined := range []bool{false, true} {
		name := "unconfined"
		if confined {
			name = "beneath --allow-dest"
		}
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			src, data := n.checkpoint("a.ckpt", 8*mib)
			dest := n.dest("a.ckpt")
			n.add(src, dest)
			n.library(func(tr *hashfile.Tree) {
				transfer.SetBW(tr, slowBW)
				transfer.SetCommand(tr, transfer.Run)
			})
			flags := []string{"--sync-interval=100ms"}
			if confined {
				flags = append(flags, "--allow-dest="+n.pfs)
			}
			d := n.start(flags...)
			n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			mark := d.LogMark()
			dir := filepath.Dir(dest)
			moved := filepath.Join(n.pfs, "moved")
			must(t, os.Rename(dir, moved))
			must(t, os.Mkdir(dir, 0o755))
			n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
			v := n.waitFor("DONE", settle, done)
			checkFlushed(t, v, map[string][]byte{src: data})
			d.WaitLogAfter(mark, settle, "destination directory moved during the copy")
			if _, err := os.Stat(filepath.Join(moved, filepath.Base(dest))); err == nil {
				t.Errorf("the copy was published in the moved directory too")
			}
		})
	}
}

// sibling returns a node sharing n's cache and PFS, with a transfer file of
// its own: a second job step, or a second library, on the same node.
func (n *node) sibling(name string) *node {
	n.t.Helper()
	s := *n
	s.transfer = filepath.Join(n.root, name, "transfer.scrinfo")
	must(n.t, os.MkdirAll(filepath.Dir(s.transfer), 0o755))
	s.store = hashfile.NewStore(s.transfer, hashfile.Flock)
	return &s
}

// TestPartialCopyLockedAgainstAnotherDaemon: two daemons serving different
// transfer files that name the same DESTINATION. The second must not write
// into the first's partial copy: it reports the conflict as the entry's
// ERROR and retries, and the first publishes its own source's bytes.
func TestPartialCopyLockedAgainstAnotherDaemon(t *testing.T) {
	n := newNode(t)
	other := n.sibling("ctl2")
	src1, data1 := n.checkpoint("one.ckpt", 8*mib)
	src2, data2 := n.checkpoint("two.ckpt", 8*mib)
	dest := n.dest("shared.ckpt")
	n.add(src1, dest)
	other.add(src2, dest)
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	// The second daemon crawls (1 byte/s): it cannot publish anything of
	// its own before the first is checked.
	other.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 1)
		transfer.SetCommand(tr, transfer.Run)
	})
	first := n.start("--sync-interval=100ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	second := other.start("--sync-interval=100ms")
	v := other.waitFor("the conflict reported", settle, func(v transfer.View) bool { return v.Files[0].Error != "" })
	if e := v.Files[0].Error; !strings.Contains(e, "locked by another process") || !strings.Contains(e, dest) {
		t.Errorf("ERROR %q should name the destination and the conflict", e)
	}
	// The second is stopped while the first finishes: retrying, it could
	// otherwise start its own partial copy between the first's DONE and
	// the check that the first left none.
	other.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Stop) })
	other.waitFor("the second daemon STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v = n.waitFor("the first daemon DONE", settle, done)
	// Not checkFlushed: the second daemon, retrying, may already have a
	// partial copy of its own beside the published file.
	if f := v.Files[0]; f.Written != int64(len(data1)) || !f.HasCRC || f.CRC != crcOf(data1) || f.Error != "" {
		t.Errorf("first daemon recorded WRITTEN %d CRC %#x ERROR %q; want %d, %#x", f.Written, f.CRC, f.Error, len(data1), crcOf(data1))
	}
	sameFile(t, dest, data1)
	// Now the second may go on; it copies its own source over the first.
	other.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, noLimit)
		transfer.SetCommand(tr, transfer.Run)
	})
	v = other.waitFor("the second daemon DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{src2: data2})
	if !first.Alive() || !second.Alive() {
		t.Fatal("a daemon died")
	}
}
