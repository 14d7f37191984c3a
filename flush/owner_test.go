package flush

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writeForeignPartial writes data as a partial copy of dst carrying the
// record of another owner's copy of src.
func writeForeignPartial(t *testing.T, dst, src string, data []byte) {
	t.Helper()
	if err := os.WriteFile(TempPath(dst), data, 0o600); err != nil {
		t.Fatal(err)
	}
	var st, pst unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(TempPath(dst), &pst); err != nil {
		t.Fatal(err)
	}
	rec := partialRecord{owner: ownerDigest("other node\x00/ctl/other.scrinfo"), token: "theirs", src: identityOf(&st).record(),
		ino: pst.Ino, written: int64(len(data)), crc: crc32.ChecksumIEEE(data)}
	if err := unix.Setxattr(TempPath(dst), identityXattr, []byte(rec.encode()), 0); err != nil {
		t.Skipf("no user extended attributes here (%v)", err)
	}
}

// TestForeignPartialLeftAlone: a partial copy whose record names another
// owner (another transfer file or node) is neither resumed, emptied,
// written nor removed, by a copy from 0 or a resume, nor by RemovePartial.
func TestForeignPartialLeftAlone(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := randBytes(1<<20, 8)
	writeFile(t, src, data)
	theirs := randBytes(300<<10, 9)
	writeForeignPartial(t, dst, src, theirs)
	c := NewCopier(nil, Options{Owner: "this node\x00/ctl/t.scrinfo"})
	for _, written := range []int64{0, 100 << 10} {
		var commits []int64
		_, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Written: written},
			func(w int64, _ uint32) error { commits = append(commits, w); return nil })
		if !errors.Is(err, ErrPartialForeign) {
			t.Fatalf("WRITTEN %d: err = %v, want ErrPartialForeign", written, err)
		}
		if written > 0 && (len(commits) != 1 || commits[0] != 0) {
			t.Errorf("WRITTEN %d: commits %v; want WRITTEN back to 0, the bytes it claimed being gone", written, commits)
		}
		if got, err := os.ReadFile(TempPath(dst)); err != nil || !bytes.Equal(got, theirs) {
			t.Fatalf("WRITTEN %d: the other owner's partial copy was changed (%v)", written, err)
		}
	}
	if removed, err := RemovePartial(TempPath(dst), "", "this node\x00/ctl/t.scrinfo"); removed || !errors.Is(err, ErrPartialForeign) {
		t.Fatalf("RemovePartial = %v, %v; want it left with ErrPartialForeign", removed, err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("published over another owner's partial copy")
	}
}

// TestPartialTakenOverIsNotClaimed: another writer takes the partial copy
// over mid-copy (writing its own record, as it does where locks are
// node-local or missing): the next commit claims nothing, WRITTEN goes
// back to 0, and nothing is published.
func TestPartialTakenOverIsNotClaimed(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := randBytes(4<<20, 10)
	writeFile(t, src, data)
	log := newCommitLog(t, data, dst)
	log.hook = func(w int64) error {
		if w > 0 {
			other := partialRecord{owner: ownerDigest("other"), token: "theirs", src: "x", ino: 1}
			if err := unix.Setxattr(TempPath(dst), identityXattr, []byte(other.encode()), 0); err != nil {
				t.Skipf("no user extended attributes here (%v)", err)
			}
		}
		return nil
	}
	c := NewCopier(nil, Options{BufSize: 256 << 10, SyncBytes: 512 << 10})
	res, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data))}, log.commit)
	if !errors.Is(err, ErrPartialTaken) || !errors.Is(err, ErrDestinationChanged) {
		t.Fatalf("err = %v, want ErrPartialTaken", err)
	}
	if res.Written != 0 || res.Complete || log.offsets[len(log.offsets)-1] != 0 {
		t.Fatalf("result %+v, commits %v: the taken-over bytes are still claimed", res, log.offsets)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("published a partial copy another writer took over")
	}
}

// TestPartialModes: the partial copy is 0600 whatever the umask; the
// published file gets 0666 less the umask.
func TestPartialModes(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	data := randBytes(1<<20, 11)
	writeFile(t, src, data)
	c := NewCopier(nil, Options{BufSize: 256 << 10, SyncBytes: 256 << 10})
	log := newCommitLog(t, data, dst)
	var partialMode uint32
	log.hook = func(w int64) error {
		var st unix.Stat_t
		if w > 0 && w < int64(len(data)) && unix.Stat(TempPath(dst), &st) == nil {
			partialMode = st.Mode & 0o7777
		}
		return nil
	}
	if _, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data))}, log.commit); err != nil {
		t.Fatal(err)
	}
	if partialMode != 0o600 {
		t.Errorf("partial copy mode %#o, want 0600", partialMode)
	}
	var st unix.Stat_t
	if err := unix.Stat(dst, &st); err != nil {
		t.Fatal(err)
	}
	if got, want := st.Mode&0o7777, 0o666&^processUmask(); got != want {
		t.Errorf("published mode %#o, want %#o", got, want)
	}
}

// TestAbandoned: another owner's partial copy counts as abandoned once its
// status has not changed for abandonedAfter.
func TestAbandoned(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		age  time.Duration
		want bool
	}{
		{0, false},
		{2 * time.Second, false},
		{abandonedAfter - time.Second, false},
		{abandonedAfter, true},
		{24 * time.Hour, true},
		{-time.Minute, false}, // a clock behind the file server's
	} {
		var st unix.Stat_t
		st.Ctim = unix.NsecToTimespec(now.Add(-tc.age).UnixNano())
		if got := abandoned(&st, now); got != tc.want {
			t.Errorf("changed %v ago: abandoned = %v, want %v", tc.age, got, tc.want)
		}
	}
}
