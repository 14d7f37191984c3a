package test

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestHugeSparseTailOnTmpfs: at a SIZE near 2^63-1 on tmpfs, SEEK_DATA
// answers ENXIO for the last page although it holds data. The daemon must
// not take that for a hole: the data at the end of the file reaches the
// destination.
func TestHugeSparseTailOnTmpfs(t *testing.T) {
	n := newNode(t)
	shm := filepath.Join(n.root, "shm")
	mountTmpfs(t, shm, 0, "size=64m")
	cache, pfs := filepath.Join(shm, "cache"), filepath.Join(shm, "pfs")
	must(t, os.MkdirAll(cache, 0o755))
	must(t, os.MkdirAll(pfs, 0o755))
	const size = math.MaxInt64
	head, tailBytes := []byte("head of the checkpoint"), bytes.Repeat([]byte("tail!"), 20)
	src, dest := filepath.Join(cache, "huge.ckpt"), filepath.Join(pfs, "huge.ckpt")
	f, err := os.Create(src)
	must(t, err)
	must(t, f.Truncate(size))
	_, err = f.WriteAt(head, 0)
	must(t, err)
	_, err = f.WriteAt(tailBytes, size-int64(len(tailBytes)))
	must(t, err)
	must(t, f.Close())
	n.library(func(tr *hashfile.Tree) {
		transfer.AddFile(tr, src, dest, size)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--verify=off")
	n.waitFor("DONE", settle, done)
	out, err := os.Open(dest)
	must(t, err)
	defer out.Close()
	fi, err := out.Stat()
	must(t, err)
	if fi.Size() != size {
		t.Fatalf("destination holds %d bytes, want %d", fi.Size(), int64(size))
	}
	got := make([]byte, len(tailBytes))
	_, err = out.ReadAt(got, size-int64(len(tailBytes)))
	must(t, err)
	if !bytes.Equal(got, tailBytes) {
		t.Fatalf("the last %d bytes of the destination are %q, want %q: the tail was dropped", len(got), got, tailBytes)
	}
	got = make([]byte, len(head))
	_, err = out.ReadAt(got, 0)
	must(t, err)
	if !bytes.Equal(got, head) {
		t.Fatalf("the head of the destination is %q, want %q", got, head)
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}
