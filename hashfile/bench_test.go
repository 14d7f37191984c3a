package hashfile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// transferTree returns a transfer file with n FILES entries, shaped like the
// SCR library's once the daemon has recorded a CRC for each.
func transferTree(n int) *Tree {
	t := New()
	t.SetFloat("BW", 52428800)
	t.SetFloat("PERCENT", 0)
	t.SetValue("COMMAND", "RUN")
	t.SetValue("STATE", "RUNNING")
	files := t.Set("FILES")
	for i := range n {
		f := files.Set(fmt.Sprintf("/tmp/user1/scr.1001186/index.0/dataset.1/rank_%d.ckpt", i))
		f.SetValue("DESTINATION", fmt.Sprintf("/p/lscratchb/user1/simulation123/scr.dataset.1/rank_%d.ckpt", i))
		f.SetUint("SIZE", uint64(1048576+i))
		f.SetUint("WRITTEN", 0)
		f.SetCRC("CRC", uint32(i)*0x9e3779b1)
	}
	return t
}

var benchSizes = []int{10, 1000, 10000, 100000}

// BenchmarkLockedUpdate measures one daemon-style update of the transfer
// file: lock, read, decode, raise one file's WRITTEN, encode, rewrite in
// place, fsync, unlock.
func BenchmarkLockedUpdate(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("files="+strconv.Itoa(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "transfer.scrinfo")
			if err := os.WriteFile(path, Encode(transferTree(n)), 0o600); err != nil {
				b.Fatal(err)
			}
			s := NewStore(path, Flock)
			key := fmt.Sprintf("/tmp/user1/scr.1001186/index.0/dataset.1/rank_%d.ckpt", n/2)
			b.ReportAllocs()
			var written uint64
			for b.Loop() {
				written++
				_, _, err := s.Update(func(t *Tree) error {
					t.Lookup("FILES", key).SetUint("WRITTEN", written)
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListUpdate measures the update with which the SCR library
// starts a flush: one locked update of a short file (STATE only) that lists
// n files, which makes the image hundreds of times longer. The Store
// makes room for the new image once, at its encoded size; growing the
// buffer as the image was written copied it a dozen times over and, on
// fresh memory, faulted in every copy.
func BenchmarkListUpdate(b *testing.B) {
	for _, n := range benchSizes[:3] {
		b.Run("files="+strconv.Itoa(n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "transfer.scrinfo")
			list := transferTree(n).Get("FILES")
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				short := New()
				short.SetValue("STATE", "STOPPED")
				if err := os.WriteFile(path, Encode(short), 0o600); err != nil {
					b.Fatal(err)
				}
				s := NewStore(path, Flock)
				if _, err := s.Read(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				_, _, err := s.Update(func(t *Tree) error {
					files := t.Set("FILES")
					for src, e := range list.All() {
						f := files.Set(src)
						for k := range e.All() {
							v, _ := e.Value(k)
							f.SetValue(k, v)
						}
					}
					t.SetValue("COMMAND", "RUN")
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode reports time and allocations of decoding a transfer file.
func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("files="+strconv.Itoa(n), func(b *testing.B) {
			img := Encode(transferTree(n))
			b.SetBytes(int64(len(img)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(img); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncode reports time and allocations of encoding a transfer file.
func BenchmarkEncode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("files="+strconv.Itoa(n), func(b *testing.B) {
			t := transferTree(n)
			b.ReportAllocs()
			for b.Loop() {
				_ = Encode(t)
			}
		})
	}
}

// BenchmarkDecodedSize reports what a decoded transfer file of 100k entries
// keeps on the heap (HeapInuse after a collection, the image itself not
// counted), per entry and in total, next to the image's own size.
func BenchmarkDecodedSize(b *testing.B) {
	const n = 100000
	img := Encode(transferTree(n))
	var before, after runtime.MemStats
	var inuse uint64
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		t, err := Decode(img)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(t)
		inuse = after.HeapInuse - before.HeapInuse
	}
	b.ReportMetric(float64(inuse)/n, "heapB/entry")
	b.ReportMetric(float64(inuse)/1e6, "heapMB")
	b.ReportMetric(float64(len(img))/n, "imageB/entry")
}

// BenchmarkOverwrite reports the encoding of a decoded transfer file over
// its own image, as an update through the Store's cache does.
func BenchmarkOverwrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run("files="+strconv.Itoa(n), func(b *testing.B) {
			t, err := Decode(Encode(transferTree(n)))
			if err != nil {
				b.Fatal(err)
			}
			buf := Encode(t)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf, _, _ = overwriteImage(buf, t)
			}
		})
	}
}
