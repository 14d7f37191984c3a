package flush

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWritebackStartsEarly: a Writeback shared by a batch's Batches calls
// syncfs, on the copies' file system, once it has been told of enough
// small held copies, before any Batch is synced; never for copies whose
// own write-back starts when they are held (kickHeld or more), under a BW
// limit, with SyncEach, or on a file system syncfs does not cover. The
// copies are durable and published by Sync as without it.
func TestWritebackStartsEarly(t *testing.T) {
	cases := []struct {
		name     string
		size     int
		bw       float64
		syncEach bool
		want     bool // syncfs expected
	}{
		{"small copies", 64 << 10, 0, false, true},
		{"copies of kickHeld", kickHeld, 0, false, false},
		{"under a BW limit", 64 << 10, 1 << 30, false, false},
		{"SyncEach", 64 << 10, 0, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pfs := filepath.Join(dir, "pfs")
			if err := os.Mkdir(pfs, 0o700); err != nil {
				t.Fatal(err)
			}
			covered := covers(t, pfs)
			th := NewThrottle()
			th.SetBW(tc.bw)
			var calls atomic.Int64
			var onOtherFS atomic.Bool
			w := &Writeback{every: int64(2 * tc.size), syncfs: func(fd int) error {
				calls.Add(1)
				if !sameFS(t, fd, pfs) {
					onOtherFS.Store(true)
				}
				return nil
			}}
			c := NewCopier(th, Options{})
			data := bytes.Repeat([]byte("w"), tc.size)
			var batches []*Batch
			var dsts []string
			for g := range 2 {
				b := NewBatch(th, tc.syncEach)
				b.SetWriteback(w)
				batches = append(batches, b)
				for i := range 4 {
					src := filepath.Join(dir, fmt.Sprintf("src%d-%d", g, i))
					if err := os.WriteFile(src, data, 0o600); err != nil {
						t.Fatal(err)
					}
					dst := filepath.Join(pfs, filepath.Base(src))
					if res, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Batch: b}, nil); err != nil || !res.Held {
						t.Fatalf("%s: %+v, %v", dst, res, err)
					}
					dsts = append(dsts, dst)
				}
			}
			w.Wait()
			want := tc.want && covered
			if got := calls.Load(); want && got == 0 || !want && got != 0 {
				t.Errorf("%d syncfs calls before the Batches were synced (file system covered: %v), want them: %v", got, covered, want)
			}
			if onOtherFS.Load() {
				t.Error("syncfs was called on another file system than the copies'")
			}
			for _, b := range batches {
				if err := b.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			for _, dst := range dsts {
				if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s not published whole (%v)", dst, err)
				}
			}
		})
	}
}

// covers tells whether Batch.Sync uses syncfs for directory dir.
func covers(t *testing.T, dir string) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return syncfsCovers(fd) && syncfsReportsErrors()
}

// sameFS tells whether descriptor fd lies on the file system of dir.
func sameFS(t *testing.T, fd int, dir string) bool {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		t.Error(err)
		return false
	}
	if err := unix.Stat(dir, &b); err != nil {
		t.Error(err)
		return false
	}
	return a.Dev == b.Dev
}
