package flush

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Benchmarks write to FLUSH_BENCH_DIR when set (e.g. a parallel file
// system mount), else to a temporary directory. Run them with
//
//	go test -run '^$' -bench . -benchtime 3x ./flush/

// benchDir returns the directory benchmarks write to.
func benchDir(b *testing.B) string {
	if d := os.Getenv("FLUSH_BENCH_DIR"); d != "" {
		d, err := os.MkdirTemp(d, "flushbench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return b.TempDir()
}

// benchSource writes a file of size bytes (random 1 MiB blocks, each made
// unique), fsyncs it so that it sits clean in the page cache, and returns
// its path.
func benchSource(b *testing.B, dir string, size int64) string {
	b.Helper()
	path := filepath.Join(dir, "src-"+sizeName(size))
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := randBytes(1<<20, 42)
	for off := int64(0); off < size; off += int64(len(block)) {
		block[0], block[1], block[2], block[3] = byte(off>>20), byte(off>>28), byte(off>>36), byte(off>>44)
		n := min(int64(len(block)), size-off)
		if _, err := f.WriteAt(block[:n], off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkCopy copies a 256 MiB file unthrottled, and with cp and
// dd conv=fsync on the same file for reference.
func BenchmarkCopy(b *testing.B) {
	const size = 256 << 20
	dir := benchDir(b)
	src := benchSource(b, dir, size)
	dst := filepath.Join(dir, "dst")
	// Each run starts with no destination and no writeback in flight.
	fresh := func(b *testing.B) {
		b.StopTimer()
		if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
			b.Fatal(err)
		}
		unix.Sync()
		b.StartTimer()
	}
	b.Run("flush", func(b *testing.B) {
		c := NewCopier(NewThrottle(), Options{})
		job := Job{Src: src, Dst: dst, Size: size}
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			fresh(b)
			if _, err := c.Copy(context.Background(), job, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tool := range []struct {
		name string
		args []string
	}{
		{"cp", []string{"cp", src, dst}},
		{"dd-fsync", []string{"dd", "if=" + src, "of=" + dst, "bs=1M", "conv=fsync", "status=none"}},
	} {
		b.Run(tool.name, func(b *testing.B) {
			if _, err := exec.LookPath(tool.args[0]); err != nil {
				b.Skip(err)
			}
			b.SetBytes(size)
			for b.Loop() {
				fresh(b)
				if out, err := exec.Command(tool.args[0], tool.args[1:]...).CombinedOutput(); err != nil {
					b.Fatalf("%v: %v\n%s", tool.args, err, out)
				}
			}
		})
	}
}

// BenchmarkBW copies for about 6 s at each limit, sampling the size of the
// partial copy every 10 ms. It reports the achieved rate over the whole copy
// and the lowest and highest rate over any 5 s window, each divided by the
// limit, and the rate of the same copy without a limit (untimed, same run):
// a limit near or above that rate cannot be reached.
func BenchmarkBW(b *testing.B) {
	const seconds = 6
	dir := benchDir(b)
	for _, mbps := range []int64{20, 100, 500} {
		bw := mbps * 1e6
		size := bw * seconds
		b.Run(fmt.Sprintf("%dMBps", mbps), func(b *testing.B) {
			src := benchSource(b, dir, size)
			defer os.Remove(src)
			dst := filepath.Join(dir, "dst")
			b.SetBytes(size)
			var achieved, lo, hi, free float64
			lo = 1e9
			for b.Loop() {
				b.StopTimer()
				// Reference: the same copy without a limit, in the same run.
				os.Remove(dst)
				unix.Sync()
				start := time.Now()
				if _, err := NewCopier(nil, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: size}, nil); err != nil {
					b.Fatal(err)
				}
				free += float64(size) / time.Since(start).Seconds() / 1e6
				os.Remove(dst)
				unix.Sync()
				th := NewThrottle()
				th.SetBW(float64(bw))
				c := NewCopier(th, Options{})
				samples, stop := sampleSize(TempPath(dst), 10*time.Millisecond)
				b.StartTimer()
				start = time.Now()
				if _, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: size}, nil); err != nil {
					b.Fatal(err)
				}
				elapsed := time.Since(start)
				stop()
				achieved += float64(size) / elapsed.Seconds() / float64(bw)
				wlo, whi := windowRates(*samples, 5*time.Second)
				lo, hi = min(lo, wlo/float64(bw)), max(hi, whi/float64(bw))
			}
			b.ReportMetric(achieved/float64(b.N), "achieved/limit")
			b.ReportMetric(free/float64(b.N), "unthrottled-MB/s")
			if hi > 0 {
				b.ReportMetric(lo, "min5s/limit")
				b.ReportMetric(hi, "max5s/limit")
			}
			os.Remove(dst)
		})
	}
}

type sizeSample struct {
	at   time.Time
	size int64
}

// sampleSize records the size of path every period until stop is called.
func sampleSize(path string, period time.Duration) (*[]sizeSample, func()) {
	var out []sizeSample
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			if st, err := os.Stat(path); err == nil {
				out = append(out, sizeSample{time.Now(), st.Size()})
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	return &out, func() { close(done); wg.Wait() }
}

// windowRates returns the lowest and highest rate, in bytes per second,
// over the windows of at least w between samples; 0, 0 when the samples
// span less than w.
func windowRates(s []sizeSample, w time.Duration) (lo, hi float64) {
	j := 0
	for i := range s {
		for j < len(s) && s[j].at.Sub(s[i].at) < w {
			j++
		}
		if j == len(s) {
			break
		}
		r := float64(s[j].size-s[i].size) / s[j].at.Sub(s[i].at).Seconds()
		if hi == 0 || r < lo {
			lo = r
		}
		hi = max(hi, r)
	}
	return lo, hi
}

// BenchmarkPercent copies 256 MiB under each PERCENT and reports the share
// of wall time the copy worked (not paused by the throttle) and the share of
// CPU time the process used (getrusage), both over the copy's wall time.
func BenchmarkPercent(b *testing.B) {
	const size = 256 << 20
	dir := benchDir(b)
	src := benchSource(b, dir, size)
	dst := filepath.Join(dir, "dst")
	for _, pct := range []float64{5, 20, 50} {
		b.Run(fmt.Sprintf("%gpct", pct), func(b *testing.B) {
			b.SetBytes(size)
			var cpu, wall, slept time.Duration
			for b.Loop() {
				b.StopTimer()
				os.Remove(dst)
				th := NewThrottle()
				th.SetPercent(pct)
				c := NewCopier(th, Options{})
				b.StartTimer()
				cpu0, start := processCPU(), time.Now()
				if _, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: size}, nil); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - cpu0
				wall += time.Since(start)
				slept += th.Stats().PercentSlept
			}
			busy := 100 * (wall - slept).Seconds() / wall.Seconds()
			b.ReportMetric(busy, "busy%")
			b.ReportMetric(busy/pct, "busy/limit")
			b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu%")
			os.Remove(dst)
		})
	}
	b.Run("unlimited", func(b *testing.B) {
		b.SetBytes(size)
		var cpu, wall time.Duration
		c := NewCopier(NewThrottle(), Options{})
		for b.Loop() {
			b.StopTimer()
			os.Remove(dst)
			b.StartTimer()
			cpu0, start := processCPU(), time.Now()
			if _, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: size}, nil); err != nil {
				b.Fatal(err)
			}
			cpu += processCPU() - cpu0
			wall += time.Since(start)
		}
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu%")
	})
}
