package prefault

import (
	"runtime/debug"
	"testing"
	"unsafe"
)

// record stands for what the callers fill: a transfer file's entry, a
// held copy's state, a job (a few hundred bytes to 1 KiB, with pointers).
type record struct {
	name string
	pad  [120]int64
}

// BenchmarkFill weighs Slice where the callers use it: a fresh slice of
// 2000 records (about 2 MB) allocated and filled whole, with Slice called
// first (on) and without (off). "cold" returns the heap's free memory to
// the kernel before each fill (untimed), as after the daemon starts or
// its heap is scavenged; "warm" reuses the heap, as a daemon flushing one
// batch after another does. Run it with
//
//	go test -run '^$' -bench BenchmarkFill -count 5 ./internal/prefault/
func BenchmarkFill(b *testing.B) {
	const n = 2000
	for _, heap := range []string{"cold", "warm"} {
		for _, on := range []bool{true, false} {
			name := heap + "/off"
			if on {
				name = heap + "/on"
			}
			b.Run(name, func(b *testing.B) {
				var keep []record
				for b.Loop() {
					if heap == "cold" {
						b.StopTimer()
						keep = nil
						debug.FreeOSMemory()
						b.StartTimer()
					}
					s := make([]record, 0, n)
					if on {
						Slice(s)
					}
					for i := range n {
						s = append(s, record{name: "x"})
						s[i].pad[0] = int64(i)
					}
					keep = s
				}
				_ = keep
				b.ReportMetric(float64(n*unsafe.Sizeof(record{}))*float64(b.N)/1e6/b.Elapsed().Seconds(), "MB/s")
			})
		}
	}
}
