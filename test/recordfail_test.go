package test

import (
	"errors"
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

// TestFailedRecordNotCopiedAgain: the control file system (a 64 KiB
// tmpfs, as /dev/shm filled by the cache) fills while a batch of three
// 1 MiB files is flushed, so that its completion cannot be recorded. The
// copies are durable and published; the daemon must retry the record
// only, not copy the batch again: each DESTINATION stays the file first
// published (same inode) until the flush is recorded DONE, byte-exact,
// once there is room again.
func TestFailedRecordNotCopiedAgain(t *testing.T) {
	n := newNode(t)
	ctl := filepath.Dir(n.transfer)
	mountTmpfs(t, ctl, 0, "size=64k,mode=0755")
	srcs := map[string][]byte{}
	var dests []string
	for i := range 3 {
		name := fmt.Sprintf("b%d.ckpt", i)
		src, data := n.checkpoint(name, mib)
		srcs[src] = data
		dests = append(dests, n.dest(name))
		n.add(src, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Stop) })
	d := n.start()
	n.waitFor("STOPPED recorded", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	// An image two bytes short of a page, so that recording anything
	// needs room, and no room left.
	tr, err := hashfile.Decode(readRaw(t, n.transfer))
	must(t, err)
	size := (len(hashfile.Encode(tr))/4096+2)*4096 - 2
	padTo(t, tr, size)
	swapRaw(t, n.transfer, hashfile.Encode(tr))
	filler := filepath.Join(ctl, "filler")
	f, err := os.Create(filler)
	must(t, err)
	for page := make([]byte, 4096); ; {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	must(t, f.Close())

	mark := d.LogMark()
	transfer.SetCommand(tr, transfer.Run)
	transfer.SetBW(tr, 8e6) // each attempt takes a moment
	padTo(t, tr, size)
	swapRaw(t, n.transfer, hashfile.Encode(tr))

	// The first attempt publishes the three files.
	first := map[string]uint64{}
	if !testenv.Until(settle, func() bool {
		for _, p := range dests {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				if _, ok := first[p]; !ok {
					first[p] = st.Ino
				}
			}
		}
		return len(first) == len(dests)
	}) {
		t.Fatalf("the files were never published:\n%s", d.Log.String()[mark:])
	}
	// Three more attempts (each logs its files), with the record failing.
	if !testenv.Until(settle, func() bool {
		return strings.Count(d.Log.String()[mark:], "\tcopy\t") >= 4*len(dests) || !d.Alive()
	}) || strings.Count(d.Log.String()[mark:], "\tcopy\t") < 4*len(dests) {
		t.Fatalf("the daemon did not retry:\n%s", d.Log.String()[mark:])
	}
	if v := n.view(); v.Done {
		t.Fatal("DONE recorded while the transfer file could not grow")
	}
	must(t, os.Remove(filler))
	v := n.waitFor("DONE once there is room", settle, done)
	checkFlushed(t, v, srcs)
	for _, p := range dests {
		var st unix.Stat_t
		must(t, unix.Stat(p, &st))
		if st.Ino != first[p] {
			t.Errorf("%s was published again (inode %d, first %d): the batch was copied again for a failed record", p, st.Ino, first[p])
		}
	}
}
