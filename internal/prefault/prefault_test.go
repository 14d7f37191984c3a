package prefault

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the pages of b that are in memory.
func resident(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestBytesMakesThePages: the pages of a fresh mapping are made by Bytes,
// without a byte of it being written, and what it held is left as it was;
// a buffer under Min is left alone. Where the kernel lacks the call, no
// page is made and nothing changes.
func TestBytesMakesThePages(t *testing.T) {
	const size = 1 << 20
	pages := size / os.Getpagesize()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	probe, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(probe)
	// Before Linux 5.14 there is no MADV_POPULATE_WRITE: no page is made,
	// and the contents must still be left as they are.
	supported := !errors.Is(unix.Madvise(probe, unix.MADV_POPULATE_WRITE), unix.EINVAL)
	want := func(n int) int {
		if supported {
			return n
		}
		return 1 // the page written below
	}
	if n := resident(t, b); n != 0 {
		t.Fatalf("%d of %d pages of a fresh mapping resident already", n, pages)
	}
	b[size-1] = 7 // one page made by a write
	Bytes(b[: 0 : size/2])
	if n := resident(t, b); n != want(pages/2+1) {
		t.Fatalf("%d pages resident after Bytes on the first half, want %d", n, want(pages/2+1))
	}
	Slice(b)
	if n := resident(t, b); n != want(pages) {
		t.Fatalf("%d of %d pages resident after Slice on the whole, want %d", n, pages, want(pages))
	}
	for i, c := range b[:size-1] {
		if c != 0 {
			t.Fatalf("byte %d is %d after Bytes, want 0", i, c)
		}
	}
	if b[size-1] != 7 {
		t.Fatal("Bytes changed a byte written before it")
	}
	small, err := unix.Mmap(-1, 0, Min/2, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(small)
	Bytes(small)
	if n := resident(t, small); n != 0 {
		t.Fatalf("%d pages of a buffer under Min made", n)
	}
}
