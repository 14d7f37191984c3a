package flush

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPartialCopyLocked: a partial copy another writer holds locked is
// neither resumed nor emptied nor written; the copy fails naming the
// conflict.
func TestPartialCopyLocked(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := randBytes(1<<20, 3)
	writeFile(t, src, data)
	theirs := randBytes(300<<10, 4)
	writePartial(t, dst, src, theirs)
	f, err := os.OpenFile(TempPath(dst), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	for _, written := range []int64{0, 100 << 10} {
		_, err := NewCopier(nil, Options{}).Copy(context.Background(),
			Job{Src: src, Dst: dst, Size: int64(len(data)), Written: written}, nil)
		if !errors.Is(err, ErrPartialLocked) || !strings.Contains(err.Error(), dst) {
			t.Fatalf("WRITTEN %d: err = %v, want ErrPartialLocked naming %s", written, err, dst)
		}
		got, err := os.ReadFile(TempPath(dst))
		if err != nil || !bytes.Equal(got, theirs) {
			t.Fatalf("WRITTEN %d: the locked partial copy was changed (%v)", written, err)
		}
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("published while another writer held the partial copy")
	}
}

// TestResumeRefusedAfterSourceRewritten: a source rewritten in place since
// the partial copy was written (same size, its modification time set back)
// is copied again from 0 rather than resumed into a mix of two versions.
func TestResumeRefusedAfterSourceRewritten(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	old := randBytes(2<<20, 5)
	writeFile(t, src, old)
	writePartial(t, dst, src, old[:1<<20])
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Stat(src, &before); err != nil {
		t.Fatal(err)
	}
	// A new status change time needs a clock tick to pass on file systems
	// with coarse timestamps: rewrite until it shows, not for a time.
	fresh := randBytes(2<<20, 6)
	for deadline := time.Now().Add(10 * time.Second); ; {
		writeFile(t, src, fresh)
		var st unix.Stat_t
		if err := unix.Stat(src, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ctim != before.Ctim {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the status change time never moved")
		}
	}
	if err := os.Chtimes(src, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	res, err := NewCopier(nil, Options{}).Copy(context.Background(),
		Job{Src: src, Dst: dst, Size: int64(len(fresh)), Written: 1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Restarted, "the source changed since partial copy") {
		t.Errorf("Restarted = %q, want the source's change named", res.Restarted)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, fresh) {
		t.Fatalf("published copy is not the source as it now stands (%v)", err)
	}
	if _, err := unix.Getxattr(dst, identityXattr, make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("the published file keeps the daemon's record (%v)", err)
	}
}
