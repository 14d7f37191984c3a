package test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// partialXattr is the extended attribute a partial copy keeps its record
// in; the tests copy it along as someone replacing the file would.
const partialXattr = "user.scr-transferd.source"

// TestPartialCopyOnlyTheDaemonWrites stops a flush mid-file, then, while no
// daemon runs, edits the partial copy in place, or replaces it with a file
// of other bytes carrying its extended attributes, under umask 022 and 002.
// The partial copy must have been created 0600 (not writable by the group
// under umask 002); the next daemon must not resume the tampered bytes: the
// DESTINATION ends byte-exact, recorded with the source's CRC, and gets
// the mode the umask gives once published.
func TestPartialCopyOnlyTheDaemonWrites(t *testing.T) {
	tamper := map[string]func(t *testing.T, path string){
		"edited in place": func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt([]byte("edited while no daemon ran"), 100)
			must(t, err)
			must(t, f.Close())
		},
		"replaced with its xattr": func(t *testing.T, path string) {
			rec := make([]byte, 512)
			k, err := unix.Getxattr(path, partialXattr, rec)
			if err != nil {
				t.Fatalf("the partial copy carries no record to copy along: %v", err)
			}
			fi, err := os.Stat(path)
			must(t, err)
			other := newContent(t, int(fi.Size()))
			tmp := filepath.Join(filepath.Dir(path), "replacement")
			must(t, os.WriteFile(tmp, other, 0o600))
			must(t, unix.Setxattr(tmp, partialXattr, rec[:k], 0))
			must(t, os.Rename(tmp, path))
		},
	}
	for _, mask := range []int{0o022, 0o002} {
		for _, how := range []string{"edited in place", "replaced with its xattr"} {
			t.Run(fmt.Sprintf("umask %03o, %s", mask, how), func(t *testing.T) {
				n := newNode(t)
				src, data := n.checkpoint("a.ckpt", 4*mib)
				dest := n.dest("a.ckpt")
				n.add(src, dest)
				n.library(func(tr *hashfile.Tree) {
					transfer.SetBW(tr, slowBW)
					transfer.SetCommand(tr, transfer.Run)
				})
				d := n.startUmask(mask, "--sync-interval=100ms")
				n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written >= 256<<10 })
				partial := flush.TempPath(dest)
				if p := perm(t, partial); p != 0o600 {
					t.Errorf("partial copy created with mode %#o, want 0600", p)
				}
				d.Signal(syscall.SIGTERM)
				if code := d.Wait(settle); code != 0 {
					t.Fatalf("daemon exited %d", code)
				}
				if f := n.view().Files[0]; f.Written == 0 || f.Written >= f.Size {
					t.Fatalf("WRITTEN %d after the stop: not mid-file", f.Written)
				}
				tamper[how](t, partial)

				n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
				n.startUmask(mask)
				v := n.waitFor("DONE", settle, done)
				checkFlushed(t, v, map[string][]byte{src: data})
				if p, want := perm(t, dest), os.FileMode(0o666&^mask); p != want {
					t.Errorf("published with mode %#o, want %#o", p, want)
				}
			})
		}
	}
}
