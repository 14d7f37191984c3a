package test

import (
	"crypto/rand"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// newContent returns size random bytes.
func newContent(t *testing.T, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// replaceByRename puts data at path as a new file renamed over it.
func replaceByRename(t *testing.T, path string, data []byte) {
	t.Helper()
	must(t, os.WriteFile(path+".new", data, 0o644))
	must(t, os.Rename(path+".new", path))
}

// checkNoStaleProgress fails if WRITTEN claims more bytes than the copy
// holds of data, the source as it now stands.
func checkNoStaleProgress(t *testing.T, v transfer.View, src string, data []byte) {
	t.Helper()
	f, ok := file(v, src)
	if !ok || f.Written == 0 {
		return
	}
	n, err := matchingPrefix(f.Dest, data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Written > n {
		t.Fatalf("WRITTEN %d, but only %d bytes of the copy are the current source's", f.Written, n)
	}
}

// TestSourceReplacedByRename: a source replaced by rename mid-copy (same
// size, new inode) is copied again from 0, the entry left as it is or
// re-added by the library in the same locked update; the old content is
// never published and older progress never overwrites the library's.
func TestSourceReplacedByRename(t *testing.T) {
	for _, readd := range []bool{false, true} {
		name := "entry kept"
		if readd {
			name = "entry re-added"
		}
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			src, _ := n.checkpoint("a.ckpt", 8*mib)
			n.add(src, n.dest("a.ckpt"))
			n.library(func(tr *hashfile.Tree) {
				transfer.SetBW(tr, slowBW)
				transfer.SetCommand(tr, transfer.Run)
			})
			d := n.start("--sync-interval=100ms")
			n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			fresh := newContent(t, 8*mib)
			mark := d.LogMark()
			n.library(func(tr *hashfile.Tree) {
				replaceByRename(t, src, fresh)
				if readd {
					transfer.AddFile(tr, src, n.dest("a.ckpt"), int64(len(fresh)))
				}
				transfer.SetBW(tr, noLimit)
			})
			// Re-added, the entry says WRITTEN 0 from the moment the new
			// file is in place: no older progress may be recorded over it.
			// Left as it is, WRITTEN speaks of the old file until the
			// daemon's next check, which must discard it.
			v := n.waitFor("DONE", settle, func(v transfer.View) bool {
				if readd {
					checkNoStaleProgress(t, v, src, fresh)
				}
				return done(v)
			})
			checkFlushed(t, v, map[string][]byte{src: fresh})
			if readd {
				d.WaitLogAfter(mark, settle, "copy abandoned")
			} else {
				d.WaitLogAfter(mark, settle, "source replaced or rewritten", "another file now")
			}
		})
	}
}

// TestSourceRewrittenWhileDown: a source rewritten in place while no daemon
// runs (same size, modification time set back) is not resumed into a mixed
// copy: the restarted daemon copies it again from 0 and says why.
func TestSourceRewrittenWhileDown(t *testing.T) {
	n := newNode(t)
	src, _ := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	d.Signal(syscall.SIGTERM)
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("daemon exited %d", code)
	}
	if w := n.view().Files[0].Written; w == 0 {
		t.Fatal("nothing durable to resume from")
	}
	fi, err := os.Stat(src)
	must(t, err)
	fresh := newContent(t, 8*mib)
	f, err := os.OpenFile(src, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(fresh, 0)
	must(t, err)
	must(t, f.Close())
	must(t, os.Chtimes(src, fi.ModTime(), fi.ModTime())) // only the status change time tells
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })

	d = n.start("--sync-interval=100ms")
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{src: fresh})
	d.WaitLog("the source changed since partial copy", settle)
}

// TestLibraryResetsWritten: when the library sets WRITTEN back to 0 during
// a copy, the daemon never records its older progress over it; it copies
// the file again from 0.
func TestLibraryResetsWritten(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	v := n.waitFor("1 MiB durable", settle, func(v transfer.View) bool { return v.Files[0].Written >= mib })
	before := v.Files[0].Written
	// Reset WRITTEN and slow the copy to a crawl (1 byte/s), so that no
	// WRITTEN as large as the old progress can come from a new copy.
	mark := d.LogMark()
	n.library(func(tr *hashfile.Tree) {
		tr.Lookup(transfer.KeyFiles, src).SetUint(transfer.KeyWritten, 0)
		transfer.SetBW(tr, 1)
	})
	if !testenv.Until(settle, func() bool {
		if containsAfter(d, mark, "copy abandoned") {
			return true
		}
		if w := n.view().Files[0].Written; w >= before {
			t.Fatalf("WRITTEN %d recorded over the library's 0 (the copy had reached %d)", w, before)
		}
		return false
	}) {
		t.Fatalf("the daemon never stopped the copy whose WRITTEN the library reset:\n%s", d.Log.String())
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v = n.waitFor("DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
}

// containsAfter tells whether the daemon's log holds s after byte mark.
func containsAfter(p *testenv.Process, mark int, s string) bool {
	l := p.Log.String()
	return len(l) > mark && strings.Contains(l[mark:], s)
}
