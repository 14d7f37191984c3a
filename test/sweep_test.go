package test

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestSweepRemovesOnlyItsOwn: in SCR every node flushes into one dataset
// directory. Node A holds a partial copy of a STOPped flush (one transfer
// file) and writes another (a second transfer file); then a daemon starts
// on node B, its transfer file naming a file of the same directory, on a
// PFS whose locks are node-local or missing. B's start-time sweep must
// leave both of A's partial copies alone: the stopped one keeps the bytes
// its WRITTEN claims, the one being written stays the file A writes, and
// both of A's flushes end byte-exact.
func TestSweepRemovesOnlyItsOwn(t *testing.T) {
	for _, locks := range lockModes {
		t.Run(locks.String(), func(t *testing.T) {
			nodes := fuseNodes(t, locks, 2)
			stopped, b := nodes[0], nodes[1]
			writing := stopped.sibling("ctl2")
			srcX, dataX := stopped.checkpoint("x.ckpt", 4*mib)
			srcY, dataY := writing.checkpoint("y.ckpt", 8*mib)
			srcB, dataB := b.checkpoint("b.ckpt", 64<<10)
			stopped.add(srcX, stopped.dest("x.ckpt"))
			writing.add(srcY, writing.dest("y.ckpt"))
			b.add(srcB, b.dest("b.ckpt"))
			for _, n := range []*node{stopped, writing} {
				n.library(func(tr *hashfile.Tree) {
					transfer.SetBW(tr, 1e6)
					transfer.SetCommand(tr, transfer.Run)
				})
			}
			stopped.start("--sync-interval=100ms")
			stopped.waitFor("x's bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			stopped.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Stop) })
			stopped.waitFor("x STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
			writing.start("--sync-interval=100ms")
			writing.waitFor("y's bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			var before unix.Stat_t
			must(t, unix.Stat(flush.TempPath(writing.dest("y.ckpt")), &before))

			b.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
			b.start()
			v := b.waitFor("B DONE", settle, done)
			checkFlushed(t, v, map[string][]byte{srcB: dataB})

			// The stopped flush's partial copy holds what its WRITTEN claims.
			durablePrefixOK(t, stopped.view().Files[0], dataX)
			var after unix.Stat_t
			if err := unix.Stat(flush.TempPath(writing.dest("y.ckpt")), &after); err != nil || after.Ino != before.Ino {
				if f := writing.view().Files[0]; f.Written < f.Size {
					t.Errorf("the partial copy node A is writing was removed or replaced (%v)", err)
				}
			}

			writing.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
			checkFlushed(t, writing.waitFor("y DONE", settle, done), map[string][]byte{srcY: dataY})
			stopped.library(func(tr *hashfile.Tree) {
				transfer.SetBW(tr, noLimit)
				transfer.SetCommand(tr, transfer.Run)
			})
			checkFlushed(t, stopped.waitFor("x DONE", settle, done), map[string][]byte{srcX: dataX})
			if _, err := os.Stat(b.dest("b.ckpt")); err != nil {
				t.Error(err)
			}
		})
	}
}
