package flush

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// randBytes returns n pseudo-random bytes, reproducible from seed.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writePartial writes data as the partial copy of dst made from src, 0600,
// with the record a Copy (of the default owner) would have kept on it
// after committing all of data.
func writePartial(t testing.TB, dst, src string, data []byte) {
	t.Helper()
	if err := os.WriteFile(TempPath(dst), data, 0o600); err != nil {
		t.Fatal(err)
	}
	recommit(t, dst, src)
}

// recommit writes on the partial copy of dst the record a Copy of src (of
// the default owner) would have kept on it after committing all its bytes.
func recommit(t testing.TB, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(TempPath(dst))
	if err != nil {
		t.Fatal(err)
	}
	var st, pst unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(TempPath(dst), &pst); err != nil {
		t.Fatal(err)
	}
	rec := partialRecord{owner: ownerDigest(""), token: "test", src: identityOf(&st).record(), ino: pst.Ino,
		written: int64(len(data)), crc: crc32.ChecksumIEEE(data)}
	if err := unix.Setxattr(TempPath(dst), identityXattr, []byte(rec.encode()), 0); err != nil {
		t.Skipf("no user extended attributes here (%v): a partial copy cannot be resumed", err)
	}
}

// writeSparse creates a file of size bytes holding data only in ranges
// (filled from seed) and returns its full content, holes as zeros. It skips
// the test when the file system does not keep the holes.
func writeSparse(t testing.TB, path string, size int64, ranges []Range, seed uint64) []byte {
	t.Helper()
	content := make([]byte, size)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, r := range ranges {
		d := randBytes(int(r.Len), seed+uint64(i))
		copy(content[r.Off:], d)
		if _, err := f.WriteAt(d, r.Off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var data int64
	for _, r := range ranges {
		data += r.Len
	}
	if alloc := allocated(t, path); alloc >= size && data < size {
		t.Skipf("file system of %s does not keep holes (%d bytes allocated for %d of data)", path, alloc, data)
	}
	return content
}

// allocated returns the bytes of storage allocated to path.
func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func blockSize(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blksize)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// commitLog records the offsets Copy commits and checks, at each one, the
// promise behind it: below Size the partial copy holds at least that many
// bytes equal to the source; at Size the destination is published, complete
// and the partial copy gone.
type commitLog struct {
	t        testing.TB
	want     []byte // the source's content
	dst, tmp string
	offsets  []int64
	hook     func(w int64) error // optional, called after the checks
}

func newCommitLog(t testing.TB, want []byte, dst string) *commitLog {
	return &commitLog{t: t, want: want, dst: dst, tmp: TempPath(dst)}
}

func (l *commitLog) commit(w int64, crc uint32) error {
	l.offsets = append(l.offsets, w)
	size := int64(len(l.want))
	if w >= 0 && w <= size {
		if want := crc32.ChecksumIEEE(l.want[:w]); crc != want {
			l.t.Errorf("commit(%d) with CRC %#08x, the source's prefix has %#08x", w, crc, want)
		}
	}
	switch {
	case w > size || w < 0:
		l.t.Errorf("commit(%d) outside [0,%d]", w, size)
	case w == size:
		got, err := os.ReadFile(l.dst)
		if err != nil {
			l.t.Errorf("commit(%d=Size) before the destination exists: %v", w, err)
		} else if !bytes.Equal(got, l.want) {
			l.t.Errorf("commit(%d=Size) but the destination differs from the source", w)
		}
		if exists(l.tmp) {
			l.t.Errorf("commit(%d=Size) while partial copy %s still exists", w, l.tmp)
		}
	default:
		got, err := os.ReadFile(l.tmp)
		if err != nil {
			l.t.Errorf("commit(%d) without a partial copy: %v", w, err)
		} else if int64(len(got)) < w {
			l.t.Errorf("commit(%d) but the partial copy holds only %d bytes", w, len(got))
		} else if !bytes.Equal(got[:w], l.want[:w]) {
			l.t.Errorf("commit(%d) but the partial copy's prefix differs from the source", w)
		}
	}
	if l.hook != nil {
		return l.hook(w)
	}
	return nil
}

// checkMonotonic checks the offsets rise strictly (a restart may first
// commit 0), stay below Size, and end with Size when complete.
func (l *commitLog) checkMonotonic(complete bool) {
	l.t.Helper()
	size := int64(len(l.want))
	for i, w := range l.offsets {
		if i > 0 && w <= l.offsets[i-1] {
			l.t.Errorf("commit offsets not increasing: %v", l.offsets)
			return
		}
		last := i == len(l.offsets)-1
		if w == size && !(last && complete) {
			l.t.Errorf("commit(Size) before the end: %v", l.offsets)
		}
	}
	if complete && (len(l.offsets) == 0 || l.offsets[len(l.offsets)-1] != size) {
		l.t.Errorf("complete copy did not end with commit(%d): %v", size, l.offsets)
	}
}

// checkDst checks the destination equals want and the result is complete
// and carries want's CRC.
func checkDst(t testing.TB, res Result, dst string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("destination differs from the source (%d vs %d bytes)", len(got), len(want))
	}
	if !res.Complete || res.Written != int64(len(want)) {
		t.Errorf("result %+v, want complete with Written=%d", res, len(want))
	}
	if c := crc32.ChecksumIEEE(want); res.CRC != c {
		t.Errorf("CRC %#x, want %#x", res.CRC, c)
	}
	if tmp := TempPath(dst); exists(tmp) {
		t.Errorf("partial copy %s left behind", tmp)
	}
	if entries, err := os.ReadDir(filepath.Dir(dst)); err == nil {
		for _, e := range entries {
			if filepath.Ext(e.Name()) == tempSuffix {
				t.Errorf("stray partial copy %s", e.Name())
			}
		}
	}
}

// sizeName names a byte count for sub-benchmarks: 4KiB, 1MiB, 1GiB.
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

// processCPU returns the user+system CPU time the process has used so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memDir returns a temporary directory in memory (tmpfs /dev/shm) when
// there is one, else in the default temporary directory.
func memDir(t testing.TB) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "flush-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}
