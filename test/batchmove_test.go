package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestBatchDirectoryMovedAway renames the dataset directory away while a
// batch of 300 small files is being copied into it, and puts in the moved
// directory files of the same names, kept there by their owner. The batch
// must make the check a lone copy makes before it links or renames
// anything: none of the owner's files replaced, nothing of the daemon's
// linked into the moved directory, and every file flushed to its
// DESTINATION path in the end, byte-exact and recorded.
func TestBatchDirectoryMovedAway(t *testing.T) {
	testenv.Long(t, "a batch of hundreds of files whose directory moves")
	const files = 300
	n := newNode(t)
	srcs := map[string][]byte{}
	var names []string
	for i := range files {
		name := fmt.Sprintf("f%03d.ckpt", i)
		src, data := n.checkpoint(name, 16<<10)
		srcs[src] = data
		names = append(names, name)
		n.add(src, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 1e6) // about 5 s for the batch: the rename comes mid-batch
		transfer.SetCommand(tr, transfer.Run)
	})
	dir := filepath.Dir(n.dest(names[0]))
	moved := filepath.Join(n.pfs, "moved")
	// One group for the whole batch, published once all its files are
	// copied: the rename below comes seconds before anything is linked.
	n.start("--sync-interval=30s")

	// The batch opens the dataset directory as its first copy starts.
	if !testenv.Until(settle, func() bool { _, err := os.Stat(dir); return err == nil }) {
		t.Fatalf("%s never created", dir)
	}
	must(t, os.Rename(dir, moved))
	before, err := os.ReadDir(moved)
	must(t, err)
	if v := n.view(); v.Files[0].Written != 0 {
		t.Fatalf("the rename came too late: a file was recorded already (WRITTEN %d)", v.Files[0].Written)
	}
	kept := map[string][]byte{}
	for _, e := range before {
		kept[e.Name()] = nil // the daemon's, if any: none expected, see below
	}
	for _, name := range names {
		b := []byte("kept here by its owner: " + name)
		must(t, os.WriteFile(filepath.Join(moved, name), b, 0o644))
		kept[name] = b
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })

	v := n.waitFor("DONE", 3*settle, done)
	checkFlushed(t, v, srcs)
	for name, want := range kept {
		got, err := os.ReadFile(filepath.Join(moved, name))
		if err != nil || want != nil && !bytes.Equal(got, want) {
			t.Errorf("%s in the moved directory: the owner's file was replaced or removed (%v)", name, err)
		}
	}
	after, err := os.ReadDir(moved)
	must(t, err)
	var extra []string
	for _, e := range after {
		if _, ok := kept[e.Name()]; !ok {
			extra = append(extra, e.Name())
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		t.Errorf("linked into the moved directory: %v", extra)
	}
	if len(before) > 0 {
		t.Errorf("the moved directory held %d names before the owner's files came", len(before))
	}
}
