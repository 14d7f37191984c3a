package flush

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLockedPartialNamesItsHolder: a partial copy whose lock is held is
// left alone, and the error names the holder: this process's own fsync
// of it, abandoned by a stopped copy and still in flight, or else another
// writer. A copy from 0 (which would reclaim the file) and a resume are
// told alike.
func TestLockedPartialNamesItsHolder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		abandoned bool // the lock is noted as an abandoned fsync's
		want      error
		notWant   error
	}{
		{"own abandoned fsync", true, ErrPartialSyncing, ErrPartialLocked},
		{"another writer", false, ErrPartialLocked, ErrPartialSyncing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			data := randBytes(1<<20, 7)
			writeFile(t, src, data)
			writePartial(t, dst, src, data[:300<<10])
			f, err := os.OpenFile(TempPath(dst), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			th := NewThrottle()
			if tc.abandoned {
				var st unix.Stat_t
				if err := unix.Fstat(int(f.Fd()), &st); err != nil {
					t.Fatal(err)
				}
				th.syncAbandoned(fileKey{dev: uint64(st.Dev), ino: st.Ino})
			}
			for _, written := range []int64{0, 100 << 10} {
				_, err := NewCopier(th, Options{}).Copy(context.Background(),
					Job{Src: src, Dst: dst, Size: int64(len(data)), Written: written}, nil)
				if !errors.Is(err, tc.want) || errors.Is(err, tc.notWant) || !strings.Contains(err.Error(), TempPath(dst)) {
					t.Errorf("WRITTEN %d: err = %v, want %v naming %s", written, err, tc.want, TempPath(dst))
				}
				if strings.Contains(err.Error(), "another process") == tc.abandoned {
					t.Errorf("WRITTEN %d: %v: blames another process wrongly", written, err)
				}
			}
			if _, err := os.Stat(dst); err == nil {
				t.Fatal("published while the partial copy was locked")
			}
		})
	}
}

// TestAbandonedSyncsCount: an fsync noted twice on one file stays in
// flight until both have returned.
func TestAbandonedSyncsCount(t *testing.T) {
	var th *Throttle
	k := fileKey{dev: 1, ino: 2}
	th.syncAbandoned(k) // no Throttle: nothing is known
	if th.syncInFlight(k) {
		t.Fatal("a nil Throttle reports an fsync in flight")
	}
	th = NewThrottle()
	steps := []struct {
		add  bool
		want bool
	}{{true, true}, {true, true}, {false, true}, {false, false}}
	for i, s := range steps {
		if s.add {
			th.syncAbandoned(k)
		} else {
			th.syncReturned(k)
		}
		if got := th.syncInFlight(k); got != s.want {
			t.Fatalf("step %d: in flight %v, want %v", i, got, s.want)
		}
	}
	if th.syncInFlight(fileKey{dev: 1, ino: 3}) {
		t.Fatal("another file reported in flight")
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestLoneCopyEndedEarlyLeaksNothing: a lone copy that ends before it
// hands its copy over (its commit fails, or its context ends) closes
// everything it opened, its batch of one's directory too: a daemon
// retrying a failing file thousands of times must not run out of
// descriptors.
func TestLoneCopyEndedEarlyLeaksNothing(t *testing.T) {
	errCommit := errors.New("no room in the transfer file")
	for _, tc := range []struct {
		name   string
		commit func(cancel context.CancelFunc) func(int64, uint32) error
	}{
		{"commit fails", func(context.CancelFunc) func(int64, uint32) error {
			return func(int64, uint32) error { return errCommit }
		}},
		{"context ends", func(cancel context.CancelFunc) func(int64, uint32) error {
			return func(int64, uint32) error { cancel(); return nil }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			data := randBytes(1<<20, 9)
			writeFile(t, src, data)
			c := NewCopier(NewThrottle(), Options{BufSize: 64 << 10, SyncBytes: 128 << 10})
			before := openFDs(t)
			for i := range 20 {
				ctx, cancel := context.WithCancel(context.Background())
				dst := filepath.Join(dir, "out", fmt.Sprintf("dst%d", i))
				res, err := c.Copy(ctx, Job{Src: src, Dst: dst, Size: int64(len(data))}, tc.commit(cancel))
				cancel()
				if err == nil || res.Complete {
					t.Fatalf("copy %d: complete (%v), want it ended early", i, err)
				}
			}
			if after := openFDs(t); after > before {
				t.Errorf("%d descriptors open after 20 copies ended early, %d before", after, before)
			}
		})
	}
}
