package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// mountTmpfs mounts a small tmpfs for storage faults. It needs root, as CI
// has; elsewhere the test skips.
func mountTmpfs(t *testing.T, dir string, flags uintptr, opts string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, opts); err != nil {
		testenv.Absent(t, "cannot mount a tmpfs on %s (%v); storage-fault tests need root", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// errorCase sets up one fault, checks that the daemon reports it as the
// file's ERROR without setting DONE, then removes the fault and checks that
// the flush completes and the ERROR is cleared.
type errorCase struct {
	name  string
	setup func(t *testing.T, n *node) (src, dest string, data []byte, fix func())
	want  string // in the ERROR message
}

func TestFileErrors(t *testing.T) {
	cases := []errorCase{
		{"missing source", func(t *testing.T, n *node) (string, string, []byte, func()) {
			src := filepath.Join(n.cache, "gone.ckpt")
			data := []byte("checkpoint data")
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, n.dest("gone.ckpt"), int64(len(data))) })
			return src, n.dest("gone.ckpt"), data, func() { must(t, os.WriteFile(src, data, 0o644)) }
		}, "no such file or directory"},
		{"source shorter than SIZE", func(t *testing.T, n *node) (string, string, []byte, func()) {
			src, data := n.checkpoint("short.ckpt", 5000)
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, n.dest("short.ckpt"), 6000) })
			return src, n.dest("short.ckpt"), data, func() {
				n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, n.dest("short.ckpt"), 5000) })
			}
		}, "6000"},
		{"source larger than SIZE", func(t *testing.T, n *node) (string, string, []byte, func()) {
			src, data := n.checkpoint("long.ckpt", 5000)
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, n.dest("long.ckpt"), 4000) })
			return src, n.dest("long.ckpt"), data, func() {
				n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, n.dest("long.ckpt"), 5000) })
			}
		}, "4000"},
		{"source is a directory", func(t *testing.T, n *node) (string, string, []byte, func()) {
			src := filepath.Join(n.cache, "dir.ckpt")
			must(t, os.Mkdir(src, 0o755))
			data := []byte("x")
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, n.dest("dir.ckpt"), 1) })
			return src, n.dest("dir.ckpt"), data, func() {
				must(t, os.Remove(src))
				must(t, os.WriteFile(src, data, 0o644))
			}
		}, "directory"},
		{"destination directory not creatable", func(t *testing.T, n *node) (string, string, []byte, func()) {
			src, data := n.checkpoint("a.ckpt", 3000)
			blocker := filepath.Join(n.pfs, "blocked")
			must(t, os.WriteFile(blocker, nil, 0o644))
			dest := filepath.Join(blocker, "sub", "a.ckpt")
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, dest, int64(len(data))) })
			return src, dest, data, func() { must(t, os.Remove(blocker)) }
		}, "not a directory"},
		{"no space", func(t *testing.T, n *node) (string, string, []byte, func()) {
			small := filepath.Join(n.root, "small")
			mountTmpfs(t, small, 0, "size=1m")
			src, data := n.checkpoint("big.ckpt", 3*mib)
			dest := filepath.Join(small, "big.ckpt")
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, dest, int64(len(data))) })
			return src, dest, data, func() { must(t, unix.Mount("", small, "", unix.MS_REMOUNT, "size=16m")) }
		}, "no space left on device"},
		{"read-only file system", func(t *testing.T, n *node) (string, string, []byte, func()) {
			ro := filepath.Join(n.root, "ro")
			mountTmpfs(t, ro, unix.MS_RDONLY, "size=16m")
			src, data := n.checkpoint("a.ckpt", 3000)
			dest := filepath.Join(ro, "a.ckpt")
			n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, dest, int64(len(data))) })
			return src, dest, data, func() { must(t, unix.Mount("", ro, "", unix.MS_REMOUNT, "size=16m")) }
		}, "read-only file system"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			okSrc, okData := n.checkpoint("fine.ckpt", 10000)
			n.add(okSrc, n.dest("fine.ckpt"))
			src, dest, data, fix := tc.setup(t, n)
			n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
			d := n.start()
			v := n.waitFor("ERROR recorded", settle, func(v transfer.View) bool {
				f, _ := file(v, src)
				return f.Error != ""
			})
			f, _ := file(v, src)
			t.Logf("ERROR: %s", f.Error)
			if !strings.Contains(f.Error, tc.want) || !strings.Contains(f.Error, filepath.Base(src)) && !strings.Contains(f.Error, filepath.Base(dest)) {
				t.Errorf("ERROR %q should say %q and name the file", f.Error, tc.want)
			}
			// The other file is flushed meanwhile; the flush is not DONE.
			v = n.waitFor("the sound file flushed", settle, func(v transfer.View) bool {
				g, _ := file(v, okSrc)
				return g.Written == g.Size && g.HasCRC
			})
			if v.Done {
				t.Fatal("DONE set while a file is in error")
			}
			sameFile(t, n.dest("fine.ckpt"), okData)
			if _, err := os.Stat(dest); err == nil {
				t.Fatal("a file in error appeared under its final name")
			}
			d.WaitLog("copy failed", settle)
			if !d.Alive() {
				t.Fatal("daemon died")
			}
			fix()
			v = n.waitFor("DONE after the fault is removed", settle, done)
			f, _ = file(v, src)
			if f.Error != "" {
				t.Fatalf("ERROR not cleared: %q", f.Error)
			}
			sameFile(t, f.Dest, data)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSourceShrinksDuringCopy(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	must(t, os.Truncate(src, 1*mib))
	v := n.waitFor("ERROR recorded", settle, func(v transfer.View) bool { return v.Files[0].Error != "" })
	t.Logf("ERROR: %s", v.Files[0].Error)
	if v.Done {
		t.Fatal("DONE with a shrunken source")
	}
	if v.Files[0].Written != 0 {
		t.Fatalf("WRITTEN %d still claimed after the partial copy was discarded", v.Files[0].Written)
	}
	if _, err := os.Stat(n.dest("a.ckpt")); err == nil {
		t.Fatal("a truncated copy was published")
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	must(t, os.WriteFile(src, data, 0o644))
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v = n.waitFor("DONE once the source is whole again", settle, done)
	if v.Files[0].Error != "" {
		t.Fatalf("ERROR not cleared: %q", v.Files[0].Error)
	}
	sameFile(t, n.dest("a.ckpt"), data)
}

func TestDestinationRemovedDuringCopy(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--sync-interval=100ms", "--retry-min=2s", "--retry-max=2s")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	must(t, os.RemoveAll(filepath.Dir(n.dest("a.ckpt")))) // someone cleans the PFS directory
	v := n.waitFor("ERROR recorded", settle, func(v transfer.View) bool { return v.Files[0].Error != "" })
	f := v.Files[0]
	t.Logf("ERROR: %s", f.Error)
	if !strings.Contains(f.Error, "removed or replaced") {
		t.Fatalf("ERROR %q should say the partial copy went away", f.Error)
	}
	if f.Written != 0 {
		t.Fatalf("WRITTEN %d still claimed after the partial copy was removed", f.Written)
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v = n.waitFor("DONE after the retry", settle, done)
	if v.Files[0].Error != "" {
		t.Fatalf("ERROR not cleared: %q", v.Files[0].Error)
	}
	sameFile(t, n.dest("a.ckpt"), data)
}
