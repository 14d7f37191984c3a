package flush

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBatchHoldsUntilSync: a copy completed into a Batch is checked but
// neither published nor recorded: commit is never called with the size,
// DESTINATION does not exist before Sync, and each destination directory
// is held once. After Sync every copy is durable under its name, with no
// partial copy left. Both ways of making the data durable are run.
func TestBatchHoldsUntilSync(t *testing.T) {
	for _, syncEach := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncEach=%v", syncEach), func(t *testing.T) {
			dir := t.TempDir()
			c := NewCopier(nil, Options{DropCache: true})
			b := NewBatch(nil, syncEach)
			data := []byte("checkpoint bytes")
			var dsts []string
			for i, d := range []string{"a", "a", "b/c"} {
				src := filepath.Join(dir, fmt.Sprintf("src%d", i))
				if err := os.WriteFile(src, data, 0o600); err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(dir, "pfs", d, fmt.Sprintf("f%d", i))
				var commits []int64
				res, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Batch: b},
					func(n int64, _ uint32) error { commits = append(commits, n); return nil })
				if err != nil || !res.Held || res.Complete || res.Written != 0 {
					t.Fatalf("%s: %+v, %v: want held, not complete, nothing durable yet", dst, res, err)
				}
				if len(commits) != 0 {
					t.Errorf("%s: commits %v: the completion is the caller's to record", dst, commits)
				}
				if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s published before the batch made it durable (%v)", dst, err)
				}
				// Unnamed until durable: the destination directory gains
				// one entry per file, its final name, at Sync.
				if names := fileNames(t, filepath.Dir(dst)); len(names) != 0 {
					t.Errorf("%s: the directory holds %v before Sync, want no file", dst, names)
				}
				dsts = append(dsts, dst)
			}
			if n, h := b.Dirs(), b.Held(); n != 2 || h != 3 {
				t.Errorf("the batch holds %d directories and %d copies, want 2 (each once) and 3", n, h)
			}
			if err := b.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, dst := range dsts {
				if err := b.Err(dst); err != nil {
					t.Errorf("%s: %v", dst, err)
				}
				if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
					t.Errorf("%s not published", dst)
				}
				if _, err := os.Stat(TempPath(dst)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("partial copy of %s left behind (%v)", dst, err)
				}
			}
			if n, h := b.Dirs(), b.Held(); n != 0 || h != 0 {
				t.Errorf("%d directories and %d copies left after Sync", n, h)
			}
			if err := b.Err(filepath.Join(dir, "pfs", "never")); err == nil {
				t.Error("Err of a destination never held is nil")
			}
		})
	}
}

// fileNames lists the names in dir that are not directories.
func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestBatchChecksAtPublishing: what happens to a held copy before Sync
// publishes it is seen then, as a lone copy sees it before its rename: a
// source replaced by a rename, a source rewritten in place. Neither is
// published. A file put at DESTINATION meanwhile is replaced, as a rename
// replaces it, also when a stale partial copy holds the partial copy's
// name; a partial copy another writer holds locked is left alone, and so
// is DESTINATION.
func TestBatchChecksAtPublishing(t *testing.T) {
	dir := t.TempDir()
	c := NewCopier(nil, Options{})
	b := NewBatch(nil, false)
	data := []byte("checkpoint bytes")
	type file struct{ src, dst string }
	var fs []file
	for i := range 6 {
		f := file{filepath.Join(dir, fmt.Sprintf("src%d", i)), filepath.Join(dir, "pfs", fmt.Sprintf("f%d", i))}
		if err := os.WriteFile(f.src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Copy(context.Background(), Job{Src: f.src, Dst: f.dst, Size: int64(len(data)), Batch: b}, nil); err != nil || !res.Held {
			t.Fatalf("%+v, %v", res, err)
		}
		fs = append(fs, f)
	}
	// 0 stays; 1 is replaced by a rename; 2 is rewritten in place, same
	// size; a file appears at DESTINATION 3, 4 and 5, with a stale partial
	// copy at 4 and one another writer holds locked at 5.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("other checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, fs[1].src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fs[2].src, []byte("CHECKPOINT BYTES"), 0o600); err != nil {
		t.Fatal(err)
	}
	theirs := []byte("an older copy")
	for _, f := range fs[3:] {
		if err := os.WriteFile(f.dst, theirs, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fs[4:] {
		if err := os.WriteFile(TempPath(f.dst), []byte("stale"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.Open(TempPath(fs[5].dst))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := lockPartial(int(lock.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background()); err == nil {
		t.Error("Sync returned nil with three copies refused")
	}
	for i, want := range []error{nil, ErrSourceReplaced, ErrSourceReplaced, nil, nil, ErrPartialLocked} {
		err := b.Err(fs[i].dst)
		if want == nil {
			if err != nil {
				t.Errorf("copy %d: %v", i, err)
			}
			if got, _ := os.ReadFile(fs[i].dst); !bytes.Equal(got, data) {
				t.Errorf("%s not published: it holds %q", fs[i].dst, got)
			}
			if _, err := os.Stat(TempPath(fs[i].dst)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("copy %d: a partial copy is left (%v)", i, err)
			}
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("copy %d: %v, want %v", i, err, want)
		}
		got, serr := os.ReadFile(fs[i].dst)
		switch {
		case i < 3 && !errors.Is(serr, os.ErrNotExist):
			t.Errorf("copy %d published despite %v", i, err)
		case i >= 3 && !bytes.Equal(got, theirs):
			t.Errorf("copy %d: DESTINATION changed to %q despite %v", i, got, err)
		}
	}
	if got, _ := os.ReadFile(TempPath(fs[5].dst)); string(got) != "stale" {
		t.Errorf("the partial copy another writer holds was changed to %q", got)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v769", true},
		{"5.8.0", true},
		{"5.7.19", false},
		{"5.10.0-21-amd64", true},
		{"4.18.0-553.el8_10.x86_64", false},
		{"5.14.0-427.13.1.el9_4.x86_64", true},
		{"5.8-rc1", true},
		{"garbage", false},
		{"", false},
	} {
		if got := kernelAtLeast(c.release, 5, 8); got != c.want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v, want %v", c.release, got, c.want)
		}
	}
}

// TestBatchDestinationIsADirectory: a DESTINATION that is a directory is
// refused (EISDIR, naming it), by the copy or by Sync, and neither it nor
// its directory is changed: no partial copy is left beside it.
func TestBatchDestinationIsADirectory(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "pfs", "ckpt")
	if err := os.WriteFile(src, []byte("checkpoint bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dst, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := NewBatch(nil, false)
	res, err := NewCopier(nil, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: 16, Batch: b}, nil)
	if err == nil && res.Held {
		_ = b.Sync(context.Background())
		err = b.Err(dst)
	}
	if !errors.Is(err, syscall.EISDIR) || !strings.Contains(err.Error(), dst) {
		t.Fatalf("err = %v, want EISDIR naming %s", err, dst)
	}
	if names := fileNames(t, filepath.Dir(dst)); len(names) != 0 {
		t.Errorf("left beside DESTINATION: %v", names)
	}
	if _, err := os.Stat(filepath.Join(dst, "inside")); err != nil {
		t.Errorf("the directory at DESTINATION was changed: %v", err)
	}
}

// TestBatchDestinationDirectoryMoved: the destination directory renamed
// away (and made again, empty) between a batch's copy and its Sync. The
// copy is linked where its directory went, but DESTINATION, looked up
// afresh, does not lead to it: the copy is refused with
// ErrDestinationMoved and nothing appears at DESTINATION.
func TestBatchDestinationDirectoryMoved(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "pfs", "set", "ckpt")
	data := []byte("checkpoint bytes")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b := NewBatch(nil, false)
	res, err := NewCopier(nil, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Batch: b}, nil)
	if err != nil || !res.Held {
		t.Fatalf("%+v, %v", res, err)
	}
	moved := filepath.Join(dir, "pfs", "set.old")
	if err := os.Rename(filepath.Dir(dst), moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background()); !errors.Is(err, ErrDestinationMoved) {
		t.Errorf("Sync: %v, want ErrDestinationMoved", err)
	}
	if err := b.Err(dst); !errors.Is(err, ErrDestinationMoved) || !strings.Contains(err.Error(), dst) {
		t.Errorf("Err: %v, want ErrDestinationMoved naming %s", err, dst)
	}
	if names := fileNames(t, filepath.Dir(dst)); len(names) != 0 {
		t.Errorf("DESTINATION's directory holds %v, want nothing", names)
	}
}

// TestBatchReclaimsStalePartial: a batch's copy from 0 that goes to an
// unnamed file finds a partial copy at its partial copy's name, left by an
// earlier copy that recorded no progress (a lone copy killed mid-copy, or a
// batch's copy killed between naming and renaming). A stale one is removed,
// as a named copy from 0 would reclaim it; one another writer holds locked
// is left alone and the copy fails with ErrPartialLocked, to be tried
// again.
func TestBatchReclaimsStalePartial(t *testing.T) {
	dir := t.TempDir()
	data := []byte("checkpoint bytes")
	var srcs, dsts [2]string
	for i := range 2 {
		srcs[i], dsts[i] = filepath.Join(dir, fmt.Sprintf("src%d", i)), filepath.Join(dir, "pfs", fmt.Sprintf("f%d", i))
		if err := os.WriteFile(srcs[i], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "pfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range dsts {
		if err := os.WriteFile(TempPath(d), []byte("stale partial copy"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.Open(TempPath(dsts[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := lockPartial(int(lock.Fd())); err != nil {
		t.Fatal(err)
	}

	c := NewCopier(nil, Options{})
	b := NewBatch(nil, false)
	res, err := c.Copy(context.Background(), Job{Src: srcs[0], Dst: dsts[0], Size: int64(len(data)), Batch: b}, nil)
	if err != nil || !res.Held {
		t.Fatalf("copy 0: %+v, %v", res, err)
	}
	_, err = c.Copy(context.Background(), Job{Src: srcs[1], Dst: dsts[1], Size: int64(len(data)), Batch: b}, nil)
	if !errors.Is(err, ErrPartialLocked) || !strings.Contains(err.Error(), dsts[1]) {
		t.Errorf("copy 1: %v, want ErrPartialLocked naming %s", err, dsts[1])
	}
	if err := b.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got, _ := os.ReadFile(dsts[0]); !bytes.Equal(got, data) {
		t.Errorf("%s holds %q, want the source's bytes", dsts[0], got)
	}
	if _, err := os.Stat(TempPath(dsts[0])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale partial copy of %s outlived its copy (%v)", dsts[0], err)
	}
	if _, err := os.Stat(dsts[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s published beside a partial copy another writer holds (%v)", dsts[1], err)
	}
	if got, _ := os.ReadFile(TempPath(dsts[1])); string(got) != "stale partial copy" {
		t.Errorf("the partial copy another writer holds was changed to %q", got)
	}
}

// TestBatchNamedPartialCopies runs a batch where partial copies must be
// named, as on a file system without O_TMPFILE (Lustre, GPFS and NFS
// among them): each copy is held under .NAME.scrpart, locked, until Sync.
// A stale partial copy at that name is taken over and emptied. At Sync,
// what happened meanwhile is seen as for unnamed copies: a source
// replaced by a rename is refused and its partial copy removed; a partial
// copy removed by someone is refused; a file put at DESTINATION is
// replaced; the others are published, with no partial copy left.
func TestBatchNamedPartialCopies(t *testing.T) {
	for _, syncEach := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncEach=%v", syncEach), func(t *testing.T) {
			dir := t.TempDir()
			c := NewCopier(nil, Options{})
			b := NewBatch(nil, syncEach)
			b.named = true
			data := []byte("checkpoint bytes")
			var srcs, dsts []string
			for i := range 5 {
				srcs = append(srcs, filepath.Join(dir, fmt.Sprintf("src%d", i)))
				dsts = append(dsts, filepath.Join(dir, "pfs", fmt.Sprintf("f%d", i)))
				if err := os.WriteFile(srcs[i], data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// 4 finds a stale partial copy, longer than the source.
			if err := os.MkdirAll(filepath.Join(dir, "pfs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(TempPath(dsts[4]), []byte("a stale partial copy, longer than the source"), 0o600); err != nil {
				t.Fatal(err)
			}
			for i := range srcs {
				res, err := c.Copy(context.Background(), Job{Src: srcs[i], Dst: dsts[i], Size: int64(len(data)), Batch: b}, nil)
				if err != nil || !res.Held {
					t.Fatalf("copy %d: %+v, %v", i, res, err)
				}
				if _, err := os.Stat(dsts[i]); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s published before Sync (%v)", dsts[i], err)
				}
				f, err := os.Open(TempPath(dsts[i]))
				if err != nil {
					t.Fatalf("copy %d held without its partial copy's name: %v", i, err)
				}
				if err := lockPartial(int(f.Fd())); !errors.Is(err, ErrPartialLocked) {
					t.Errorf("copy %d: the held partial copy is not locked (%v)", i, err)
				}
				f.Close()
			}
			// 1: the source replaced by a rename; 2: the partial copy
			// removed; 3: a file put at DESTINATION.
			other := filepath.Join(dir, "other")
			if err := os.WriteFile(other, []byte("other checkpoint"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, srcs[1]); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(TempPath(dsts[2])); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dsts[3], []byte("an older copy"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := b.Sync(context.Background()); err == nil {
				t.Error("Sync returned nil with two copies refused")
			}
			for i, want := range []error{nil, ErrSourceReplaced, ErrDestinationChanged, nil, nil} {
				err := b.Err(dsts[i])
				got, rerr := os.ReadFile(dsts[i])
				switch {
				case want == nil && err != nil:
					t.Errorf("copy %d: %v", i, err)
				case want == nil && !bytes.Equal(got, data):
					t.Errorf("%s holds %q, want the source's bytes", dsts[i], got)
				case want != nil && !errors.Is(err, want):
					t.Errorf("copy %d: %v, want %v", i, err, want)
				case want != nil && !errors.Is(rerr, os.ErrNotExist):
					t.Errorf("copy %d published despite %v", i, err)
				}
				if _, err := os.Stat(TempPath(dsts[i])); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("copy %d: a partial copy is left (%v)", i, err)
				}
			}
		})
	}
}

// TestLinkTemp: an unnamed partial copy is linked under its name with its
// bytes, whether the Copier links the descriptor itself or, once that was
// refused, goes through /proc; an existing name is not replaced (EEXIST,
// which linkAnon answers by renaming over it). A process the kernel lets
// link a descriptor (root, or any process on Linux 6.10 and later) never
// falls back to /proc.
func TestLinkTemp(t *testing.T) {
	for _, viaProc := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaProc=%v", viaProc), func(t *testing.T) {
			dir := t.TempDir()
			dfd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
			mustOK(t, err)
			defer syscall.Close(dfd)
			tmp, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE, 0o644)
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("no O_TMPFILE in %s, which CI's file system has: %v", dir, err)
				}
				t.Skipf("no O_TMPFILE here: %v", err)
			}
			defer syscall.Close(tmp)
			data := randBytes(5000, 7)
			if _, err := syscall.Pwrite(tmp, data, 0); err != nil {
				t.Fatal(err)
			}
			c := NewCopier(nil, Options{})
			c.procLink.Store(viaProc)
			r := &run{c: c, tmp: tmp, dir: dfd}
			mustOK(t, r.linkTemp("a"))
			if got, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("linked file: %d bytes, %v; want the %d bytes written", len(got), err, len(data))
			}
			writeFile(t, filepath.Join(dir, "b"), []byte("other"))
			if err := r.linkTemp("b"); !errors.Is(err, syscall.EEXIST) {
				t.Errorf("linking over an existing name: %v, want EEXIST", err)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "b")); string(got) != "other" {
				t.Errorf("the existing name now holds %q", got)
			}
			var uts unix.Utsname
			mustOK(t, unix.Uname(&uts))
			release := unix.ByteSliceToString(uts.Release[:])
			if !viaProc && (os.Geteuid() == 0 || kernelAtLeast(release, 6, 10)) && c.procLink.Load() {
				t.Errorf("linking the descriptor was given up on (root %v, kernel %s)", os.Geteuid() == 0, release)
			}
		})
	}
}

// TestBatchSyncReportsWritebackErrorSeenElsewhere: a held copy whose bytes
// never reached the disk is not published, even when the write-back error
// was first seen by another syncfs of the same file system (another
// process's, which clears nothing for the Batch: syncfs(2) reports an
// error once per open file, and the Batch syncs through a directory it
// opened before the copy).
func TestBatchSyncReportsWritebackErrorSeenElsewhere(t *testing.T) {
	mnt := failingExt4(t)
	if !syncfsReportsErrors() {
		t.Skip("this kernel's syncfs does not report write-back errors (Linux < 5.8): Batch fsyncs each file")
	}
	other, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	src := filepath.Join(t.TempDir(), "src")
	data := randBytes(256<<10, 21)
	writeFile(t, src, data)
	dst := filepath.Join(mnt, "pfs", "ckpt")
	b := NewBatch(nil, false)
	res, err := NewCopier(nil, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Batch: b}, nil)
	if err != nil || !res.Held {
		t.Fatalf("copy: %+v, %v: want it held", res, err)
	}
	if err := unix.Syncfs(other); err == nil {
		t.Fatal("the write-back of the copy did not fail: the test's file system does not fail as it should")
	} else {
		t.Logf("the other syncfs saw: %v", err)
	}
	err = b.Sync(context.Background())
	if err == nil || b.Err(dst) == nil {
		t.Fatalf("Sync: %v, Err(%s): %v: the copy's bytes never reached the disk, want it failed", err, dst, b.Err(dst))
	}
	if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s was published (%v) though its bytes never reached the disk", dst, err)
	}
}

// failingExt4 mounts an ext4 whose every new data block fails to be
// written back: its loop device's backing file lies on a tmpfs filled up
// after mkfs, so a write-back that needs a new block of the image gets
// ENOSPC from the tmpfs, an I/O error for the ext4. It needs root (mount,
// losetup) and mkfs.ext4; the test is skipped without them, and fails
// under CI, which has them.
func failingExt4(t *testing.T) string {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s not found: %v", tool, err)
		}
	}
	back := filepath.Join(t.TempDir(), "back")
	mnt := filepath.Join(t.TempDir(), "mnt")
	for _, d := range []string{back, mnt} {
		mustOK(t, os.Mkdir(d, 0o755))
	}
	if err := unix.Mount("tmpfs", back, "tmpfs", 0, "size=16m"); err != nil {
		skip("cannot mount a tmpfs (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(back, unix.MNT_DETACH) })
	img := filepath.Join(back, "ext4.img")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			skip("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	mustOK(t, os.WriteFile(img, nil, 0o600))
	mustOK(t, os.Truncate(img, 128<<20))
	run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=0,nodiscard", img)
	loop := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", loop).Run() })
	if err := unix.Mount(loop, mnt, "ext4", 0, ""); err != nil {
		skip("cannot mount %s: %v", loop, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	// Fill the tmpfs: the image can no longer grow.
	fill, err := os.Create(filepath.Join(back, "fill"))
	mustOK(t, err)
	defer fill.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := fill.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	return mnt
}

// TestBatchSyncStoppedPublishesNothing: a Sync whose context has ended
// (the flush stopped before the group was made durable) publishes nothing
// and reports every held copy stopped, with ctx's error; the named partial
// copies, which hold no committed progress, are not left behind, and the
// Batch holds nothing afterwards. Unnamed and named partial copies both.
func TestBatchSyncStoppedPublishesNothing(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			dir := t.TempDir()
			c := NewCopier(nil, Options{})
			b := NewBatch(nil, false)
			b.named = named
			var dsts []string
			for i := range 3 {
				src := filepath.Join(dir, fmt.Sprintf("src%d", i))
				if err := os.WriteFile(src, []byte("checkpoint bytes"), 0o600); err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(dir, "pfs", fmt.Sprintf("f%d", i))
				if res, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: 16, Batch: b}, nil); err != nil || !res.Held {
					t.Fatalf("%s: %+v, %v: want held", dst, res, err)
				}
				dsts = append(dsts, dst)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := b.Sync(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("Sync after the context ended = %v, want context.Canceled", err)
			}
			for _, dst := range dsts {
				if err := b.Err(dst); !errors.Is(err, context.Canceled) {
					t.Errorf("%s: Err = %v, want context.Canceled", dst, err)
				}
				if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s published by a stopped Sync (%v)", dst, err)
				}
				if _, err := os.Lstat(TempPath(dst)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("partial copy of %s left behind (%v)", dst, err)
				}
			}
			if n, h := b.Dirs(), b.Held(); n != 0 || h != 0 {
				t.Errorf("%d directories and %d copies left after Sync", n, h)
			}
		})
	}
}

func TestFirstErr(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	tests := []struct {
		name string
		errs map[string]error
		want error
	}{
		{"none", map[string]error{"/p/a": nil, "/p/b": nil}, nil},
		{"one", map[string]error{"/p/a": nil, "/p/b": errB}, errB},
		{"the first destination's", map[string]error{"/p/b": errB, "/p/a": errA, "/p/c": errB}, errA},
		{"empty", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 { // map order differs from run to run
				if got := firstErr(tc.errs); got != tc.want {
					t.Fatalf("firstErr = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestFinished: a sync step done counts as finished even when the context
// has ended meanwhile; one not done is abandoned once the context ends.
func TestFinished(t *testing.T) {
	tests := []struct {
		name         string
		done, cancel bool
		want         bool
	}{
		{"done", true, false, true},
		{"done, context ended", true, true, true},
		{"context ended first", false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			if tc.done {
				close(done)
			}
			if tc.cancel {
				cancel()
			}
			for range 20 { // select picks among ready cases at random
				if got := finished(ctx, done); got != tc.want {
					t.Fatalf("finished = %v, want %v", got, tc.want)
				}
			}
		})
	}
}
