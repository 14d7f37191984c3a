// Package test holds end-to-end and fault tests: real scr-transferd
// processes, real files, real signals, and a transfer file written the way
// the SCR library writes it.
package test

import (
	"bytes"
	"crypto/rand"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// bins is this package's once-per-process build of scr-transferd and
// scr-ctl, with the race detector when the tests run with it, built the
// first time a test asks for it (a run whose tests all skip builds nothing).
var bins = testenv.NewBinaries(testenv.Build{Race: testenv.Race})

// helperBins is this package's once-per-process build of its helper
// programs, built the first time a test asks for one: fusemount, the FUSE
// file system standing in for a PFS, and tearwriter, a process rewriting a
// transfer file until it is killed.
var helperBins = testenv.NewBinaries(testenv.Build{Commands: []string{"internal/fusetest/cmd/fusemount", "test/tearwriter"}})

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins, helperBins)) }

// node is one compute node's worth of directories: a cache, a PFS and the
// control directory holding the transfer file.
type node struct {
	t        *testing.T
	root     string
	cache    string
	pfs      string
	transfer string
	store    *hashfile.Store
}

func newNode(t *testing.T) *node {
	t.Helper()
	d := testenv.NewNode(t)
	n := &node{t: t, root: d.Root, cache: d.Cache, pfs: d.PFS, transfer: d.Transfer}
	n.store = hashfile.NewStore(n.transfer, hashfile.Flock)
	return n
}

// checkpoint writes a random file of size bytes in the cache and returns
// its path and contents.
func (n *node) checkpoint(name string, size int) (string, []byte) {
	n.t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		n.t.Fatal(err)
	}
	p := filepath.Join(n.cache, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		n.t.Fatal(err)
	}
	return p, data
}

// dest returns the destination path on the PFS for a cache file name.
func (n *node) dest(name string) string { return filepath.Join(n.pfs, "ckpt.1", name) }

// library applies edits to the transfer file under its lock, as the SCR
// library does.
func (n *node) library(edit func(t *hashfile.Tree)) {
	n.t.Helper()
	if _, _, err := n.store.Update(func(t *hashfile.Tree) error { edit(t); return nil }); err != nil {
		n.t.Fatal(err)
	}
}

// add adds a FILES entry for src as the library does.
func (n *node) add(src, dest string) {
	n.t.Helper()
	fi, err := os.Stat(src)
	if err != nil {
		n.t.Fatal(err)
	}
	n.library(func(t *hashfile.Tree) { transfer.AddFile(t, src, dest, fi.Size()) })
}

// view reads the transfer file under a shared lock.
func (n *node) view() transfer.View {
	n.t.Helper()
	tree, err := n.store.Read()
	if err != nil {
		n.t.Fatal(err)
	}
	return transfer.Read(tree)
}

// waitFor polls the transfer file until cond holds, failing after timeout
// with the transfer file as it last was.
func (n *node) waitFor(what string, timeout time.Duration, cond func(v transfer.View) bool) transfer.View {
	n.t.Helper()
	var (
		v    transfer.View
		tree *hashfile.Tree
		err  error
	)
	if testenv.Until(timeout, func() bool {
		tree, err = n.store.Read()
		if err != nil {
			return false
		}
		v = transfer.Read(tree)
		return cond(v)
	}) {
		return v
	}
	if err != nil {
		n.t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
	}
	n.t.Fatalf("timed out after %v waiting for %s; transfer file:\n%s", timeout, what, hashfile.Format(tree, 2))
	return v
}

func done(v transfer.View) bool { return v.Done && v.State == transfer.Stopped && !v.HasPending() }

// file returns the FILES entry of src.
func file(v transfer.View, src string) (transfer.File, bool) {
	for _, f := range v.Files {
		if f.Src == src {
			return f, true
		}
	}
	return transfer.File{}, false
}

// start launches scr-transferd on the node's transfer file with extra flags:
// it is killed at the end of the test if still running, and its log shown
// if the test failed.
func (n *node) start(flags ...string) *testenv.Process {
	n.t.Helper()
	args := append([]string{"--retry-min=100ms", "--retry-max=500ms"}, flags...)
	args = append(args, n.transfer)
	return testenv.Start(n.t, exec.Command(bins.Path(n.t, testenv.Daemon), args...))
}

// sameFile fails unless path holds exactly want.
func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from its source (%d vs %d bytes)", path, len(got), len(want))
	}
}

// durablePrefixOK checks the durability promise for one file: WRITTEN never
// exceeds the bytes of the partial (or final) copy that equal the source.
func durablePrefixOK(t *testing.T, f transfer.File, src []byte) {
	t.Helper()
	if f.Written == 0 {
		return
	}
	var copyBytes []byte
	for _, p := range []string{flush.TempPath(f.Dest), f.Dest} {
		if b, err := os.ReadFile(p); err == nil {
			copyBytes = b
			break
		}
	}
	n := 0
	for n < len(copyBytes) && n < len(src) && copyBytes[n] == src[n] {
		n++
	}
	if int64(n) < f.Written {
		t.Fatalf("%s: WRITTEN %d but only %d bytes of the copy match the source", f.Src, f.Written, n)
	}
}

func crcOf(b []byte) uint32 { return crc32.ChecksumIEEE(b) }
