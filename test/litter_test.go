package test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// waitGone polls until path does not exist.
func waitGone(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	var err error
	if !testenv.Until(timeout, func() bool {
		_, err = os.Lstat(path)
		return errors.Is(err, os.ErrNotExist)
	}) {
		t.Fatalf("%s still there after %v (%v)", path, timeout, err)
	}
}

// TestNoPartialCopyLitter: when the library drops or redirects an entry
// mid-copy, its partial copy does not stay on the PFS. SCR_Finalize sends
// STOP and clears FILES in one update while a flush runs.
func TestNoPartialCopyLitter(t *testing.T) {
	cases := []struct {
		name string
		edit func(tr *hashfile.Tree, n *node, src string, size int64)
		rest func(t *testing.T, n *node, src string, data []byte)
	}{
		{"STOP and FILES cleared", func(tr *hashfile.Tree, n *node, src string, size int64) {
			transfer.SetCommand(tr, transfer.Stop)
			tr.Unset(transfer.KeyFiles)
		}, nil},
		{"DESTINATION changed", func(tr *hashfile.Tree, n *node, src string, size int64) {
			transfer.AddFile(tr, src, n.dest("elsewhere.ckpt"), size)
			transfer.SetBW(tr, noLimit)
		}, func(t *testing.T, n *node, src string, data []byte) {
			v := n.waitFor("DONE at the new DESTINATION", settle, done)
			checkFlushed(t, v, map[string][]byte{src: data})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			src, data := n.checkpoint("a.ckpt", 8*mib)
			n.add(src, n.dest("a.ckpt"))
			n.library(func(tr *hashfile.Tree) {
				transfer.SetBW(tr, slowBW)
				transfer.SetCommand(tr, transfer.Run)
			})
			d := n.start("--sync-interval=100ms")
			n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			partial := flush.TempPath(n.dest("a.ckpt"))
			if _, err := os.Stat(partial); err != nil {
				t.Fatalf("no partial copy mid-flush: %v", err)
			}
			mark := d.LogMark()
			n.library(func(tr *hashfile.Tree) { tc.edit(tr, n, src, int64(len(data))) })
			waitGone(t, partial, settle)
			d.WaitLogAfter(mark, settle, "removed partial copy", partial)
			if tc.rest != nil {
				tc.rest(t, n, src, data)
			}
			if !d.Alive() {
				t.Fatal("daemon died")
			}
		})
	}
}

// TestLeftoverPartialsRemovedAtStart: at start, partial copies that no
// entry accounts for, in the destination directories the transfer file
// names, are removed; one another process holds locked, or one in a
// directory the transfer file does not name, is left alone.
func TestLeftoverPartialsRemovedAtStart(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 100*1024)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	dir := filepath.Dir(n.dest("a.ckpt"))
	must(t, os.MkdirAll(dir, 0o755))
	gone := flush.TempPath(n.dest("gone.ckpt"))
	busy := flush.TempPath(n.dest("busy.ckpt"))
	elsewhere := flush.TempPath(filepath.Join(n.pfs, "other", "x.ckpt"))
	must(t, os.MkdirAll(filepath.Dir(elsewhere), 0o755))
	for _, p := range []string{gone, busy, elsewhere} {
		must(t, os.WriteFile(p, []byte("left by an earlier run"), 0o644))
	}
	held, err := os.Open(busy)
	must(t, err)
	defer held.Close()
	must(t, unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB))

	d := n.start()
	waitGone(t, gone, settle)
	d.WaitLog("partial copy left: another process is writing it", settle)
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
	for _, p := range []string{busy, elsewhere} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s should have been left alone: %v", p, err)
		}
	}
}
