package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// envInt returns the positive integer in the environment variable name, or
// def when it is unset. A malformed value fails the test rather than being
// silently replaced.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

// envFloat returns the positive number in the environment variable name,
// or def when it is unset.
func envFloat(t *testing.T, name string, def float64) float64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return v
}

// envDuration returns the duration in the environment variable name (a Go
// duration such as 10s, or a number of seconds), or def when it is unset.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
		return time.Duration(f * float64(time.Second))
	}
	t.Fatalf("%s=%q: want a duration such as 10s", name, s)
	return 0
}

// matchingPrefix returns how many leading bytes of the copy of a file equal
// its source: the larger count of the partial copy (flush.TempPath(dest))
// and of the file under its final name. A missing copy counts 0.
func matchingPrefix(dest string, src []byte) (int64, error) {
	var best int64
	for _, p := range []string{flush.TempPath(dest), dest} {
		n, err := prefixOf(p, src)
		if err != nil {
			return 0, err
		}
		best = max(best, n)
	}
	return best, nil
}

// prefixOf returns how many leading bytes of the file at path equal want.
func prefixOf(path string, want []byte) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for n < int64(len(want)) {
		k, err := f.Read(buf[:min(len(buf), len(want)-int(n))])
		if w := want[n : n+int64(k)]; !bytes.Equal(buf[:k], w) {
			i := 0
			for buf[i] == w[i] {
				i++
			}
			return n + int64(i), nil
		}
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// lockedFile opens path and takes its flock the way KVTree does. The lock
// is released by closing the file.
func lockedFile(path string, exclusive bool) (*os.File, error) {
	flags, how := os.O_RDONLY, unix.LOCK_SH
	if exclusive {
		flags, how = os.O_RDWR, unix.LOCK_EX
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return f, nil
}

// writeRaw replaces the bytes of the transfer file in place under its
// exclusive lock, as a library with a bug (or a torn write) would leave it,
// so that the daemon never sees a half-written image.
func writeRaw(t *testing.T, path string, img []byte) {
	t.Helper()
	f, err := lockedFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(img, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(img))); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// readRaw returns the bytes of the transfer file, read under its shared lock.
func readRaw(t *testing.T, path string) []byte {
	t.Helper()
	f, err := lockedFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkFlushed fails unless every file of v is complete: WRITTEN = SIZE, the
// recorded CRC is the CRC32 of its source, no ERROR, no partial copy left,
// and the destination holds exactly the source's bytes.
func checkFlushed(t *testing.T, v transfer.View, srcs map[string][]byte) {
	t.Helper()
	for src, data := range srcs {
		f, ok := file(v, src)
		if !ok {
			t.Errorf("%s: FILES entry missing", src)
			continue
		}
		if f.Written != int64(len(data)) || !f.HasCRC || f.CRC != crcOf(data) || f.Error != "" {
			t.Errorf("%s: WRITTEN %d CRC %#x (recorded %v) ERROR %q; want WRITTEN %d CRC %#x",
				src, f.Written, f.CRC, f.HasCRC, f.Error, len(data), crcOf(data))
		}
		got, err := os.ReadFile(f.Dest)
		if err != nil {
			t.Errorf("%s: %v", src, err)
		} else if !bytes.Equal(got, data) {
			t.Errorf("%s differs from its source %s (%d vs %d bytes)", f.Dest, src, len(got), len(data))
		}
		if _, err := os.Stat(flush.TempPath(f.Dest)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("partial copy of %s left behind (%v)", f.Dest, err)
		}
	}
}

// swapRaw replaces the bytes of the transfer file in place and returns the
// bytes it held, both under one hold of the exclusive lock, so that nothing
// written in between is lost when the old bytes are put back.
func swapRaw(t *testing.T, path string, img []byte) (old []byte) {
	t.Helper()
	f, err := lockedFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if old, err = io.ReadAll(f); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(img))); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return old
}
