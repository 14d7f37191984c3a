package flush

import (
	"hash/crc32"
	"testing"
)

func TestCRCZeros(t *testing.T) {
	zeros := make([]byte, 3<<20)
	for _, seed := range []uint32{0, 1, 0xffffffff, 0xdeadbeef} {
		for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 255, 256, 4095, 4096, 65537, 1 << 20, 3 << 20} {
			want := crc32.Update(seed, crc32.IEEETable, zeros[:n])
			if got := crcZeros(seed, int64(n)); got != want {
				t.Errorf("crcZeros(%#x, %d) = %#x, want %#x", seed, n, got, want)
			}
		}
	}
	if got := crcZeros(5, -3); got != 5 {
		t.Errorf("negative length changed the CRC: %#x", got)
	}
}

// FuzzCRCZeros checks the zero extension against the table-driven CRC, and
// that the extension composes: data, then zeros, then data.
func FuzzCRCZeros(f *testing.F) {
	f.Add([]byte("checkpoint"), uint16(0), []byte{})
	f.Add([]byte{}, uint16(1), []byte{1})
	f.Add([]byte{0xff, 0, 0xff}, uint16(4096), []byte("tail"))
	f.Fuzz(func(t *testing.T, head []byte, n uint16, tail []byte) {
		whole := append(append(append([]byte{}, head...), make([]byte, n)...), tail...)
		got := crc32.Update(crcZeros(crc32.ChecksumIEEE(head), int64(n)), crc32.IEEETable, tail)
		if want := crc32.ChecksumIEEE(whole); got != want {
			t.Fatalf("got %#x, want %#x", got, want)
		}
	})
}

// BenchmarkCRCZeros compares the GF(2) extension with running the CRC over a
// reused buffer of zeros.
func BenchmarkCRCZeros(b *testing.B) {
	zeros := make([]byte, 1<<20)
	for _, n := range []int64{4 << 10, 1 << 20, 1 << 30} {
		b.Run("gf2/"+sizeName(n), func(b *testing.B) {
			var c uint32
			for b.Loop() {
				c = crcZeros(c, n)
			}
		})
		b.Run("buffer/"+sizeName(n), func(b *testing.B) {
			var c uint32
			for b.Loop() {
				for left := n; left > 0; {
					k := min(left, int64(len(zeros)))
					c = crc32.Update(c, crc32.IEEETable, zeros[:k])
					left -= k
				}
			}
		})
	}
}
