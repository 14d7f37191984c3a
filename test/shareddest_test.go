package test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/fusetest"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// fuseNodes returns count nodes whose PFS directories are FUSE mounts of
// one backing directory with the given locking, each mount one compute
// node's client: where locks are node-local (BeeGFS by default, NFS with
// local_lock) or missing (Lustre -o noflock: ENOSYS), a lock taken on one
// node does not exclude a writer on another. It fails the test where FUSE
// is not available and CI requires it (CI=true), else skips.
func fuseNodes(t *testing.T, locks fusetest.LockMode, count int) []*node {
	t.Helper()
	if err := fusetest.Available(); err != nil {
		testenv.Absent(t, "%v", err)
	}
	backing := filepath.Join(t.TempDir(), "pfs")
	must(t, os.MkdirAll(backing, 0o755))
	var nodes []*node
	for range count {
		n := newNode(t)
		srv, err := fusetest.Mount(backing, n.pfs, fusetest.Options{Locks: locks})
		must(t, err)
		t.Cleanup(func() {
			if err := srv.Close(); err != nil {
				t.Error(err)
			}
		})
		nodes = append(nodes, n)
	}
	return nodes
}

// lockModes are the PFS lockings the tests with several nodes run on.
var lockModes = []fusetest.LockMode{fusetest.NodeLocalLocks, fusetest.NoLocks}

// TestSharedDestinationAcrossNodes: two transfer files on two nodes name
// one DESTINATION (two jobs, one prefix) on a PFS whose locks are
// node-local or missing, with sources of different bytes. The partial-copy
// lock cannot keep the second daemon out; it must still never empty or
// write the first's partial copy, and neither may claim bytes it did not
// write: when the first records its file complete, DESTINATION holds its
// source's bytes; the second then ends with its own bytes there, recorded
// complete (an ERROR while it waits for the first is honest), no livelock.
func TestSharedDestinationAcrossNodes(t *testing.T) {
	testenv.Long(t, "daemons of several nodes flushing to one destination under each locking mode")
	for _, locks := range lockModes {
		t.Run(locks.String(), func(t *testing.T) {
			nodes := fuseNodes(t, locks, 2)
			a, b := nodes[0], nodes[1]
			srcA, dataA := a.checkpoint("rank.ckpt", 4*mib)
			srcB, dataB := b.checkpoint("rank.ckpt", 4*mib)
			a.add(srcA, a.dest("shared.ckpt"))
			b.add(srcB, b.dest("shared.ckpt"))
			for _, n := range nodes {
				n.library(func(tr *hashfile.Tree) {
					transfer.SetBW(tr, 1e6) // about 4 s each
					transfer.SetCommand(tr, transfer.Run)
				})
			}
			a.start("--sync-interval=100ms")
			a.waitFor("A's bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
			b.start("--sync-interval=100ms")

			// The moment A records its file complete, DESTINATION must
			// hold A's bytes: B cannot have published yet (it could not
			// start its own copy before A's was published).
			a.waitFor("A DONE", 3*settle, done)
			got, err := os.ReadFile(a.dest("shared.ckpt"))
			must(t, err)
			if !bytes.Equal(got, dataA) {
				t.Errorf("A recorded its file complete; DESTINATION holds other bytes (equal to B's source: %v)", bytes.Equal(got, dataB))
			}
			if f := a.view().Files[0]; f.CRC != crcOf(dataA) {
				t.Errorf("A recorded CRC %#x, its source's is %#x", f.CRC, crcOf(dataA))
			}
			v := b.waitFor("B DONE", 3*settle, done)
			checkFlushed(t, v, map[string][]byte{srcB: dataB})
		})
	}
}
