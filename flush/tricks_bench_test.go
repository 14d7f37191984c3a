package flush

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The benchmarks below weigh each optimisation of a batch's copies: each
// runs the same flush with the optimisation (sub-benchmark "on") and
// without it ("off") and reports files/s and MB/s, so that the two are
// compared within one run. Run them with, for example,
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench 'BenchmarkTrick' -benchtime 2x ./flush/; done
//
// and compare the medians of on and off, and their ratio in each round
// (-count would run all the rounds of on before those of off).

// batchSetup is how a benchmarked batch is flushed.
type batchSetup struct {
	opts     Options // each stream's Copier's
	syncEach bool    // NewBatch's
}

// benchStreams is the number of Copiers a benchmarked batch runs at once,
// as the daemon's streams do.
const benchStreams = 2

// benchSources writes n source files of size bytes each into dir and
// fsyncs them, and returns their paths.
func benchSources(b *testing.B, dir string, n int, size int64) []string {
	b.Helper()
	data := randBytes(int(size), 7)
	srcs := make([]string, n)
	for i := range srcs {
		srcs[i] = filepath.Join(dir, fmt.Sprintf("rank_%d.ckpt", i))
		if size >= 8 {
			data[0], data[1], data[2] = byte(i), byte(i>>8), byte(i>>16) // each file its own
		}
		if err := os.WriteFile(srcs[i], data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	unix.Sync()
	return srcs
}

// benchBatch flushes srcs (size bytes each) into a fresh directory as one
// Batch per iteration, set up as s says, and reports files/s and MB/s.
// Each iteration starts with no destination and no write-back in flight.
func benchBatch(b *testing.B, srcs []string, size int64, s batchSetup) {
	dst := filepath.Join(benchDir(b), "dst")
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		unix.Sync()
		b.StartTimer()
		t := NewThrottle()
		bt := NewBatch(t, s.syncEach)
		copyInto(b, ctx, t, bt, srcs, dst, size, s.opts)
		if err := bt.Sync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	secs := b.Elapsed().Seconds()
	files := float64(len(srcs) * b.N)
	b.ReportMetric(files/secs, "files/s")
	b.ReportMetric(files*float64(size)/1e6/secs, "MB/s")
}

// copyInto copies every source into dir with benchStreams Copiers taking
// the files in turn, each handing its completed copy to bt.
func copyInto(b *testing.B, ctx context.Context, t *Throttle, bt *Batch, srcs []string, dir string, size int64, o Options) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchStreams)
	for range benchStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := NewCopier(t, o)
			for i := int(next.Add(1) - 1); i < len(srcs); i = int(next.Add(1) - 1) {
				job := Job{Src: srcs[i], Dst: filepath.Join(dir, filepath.Base(srcs[i])), Size: size, Batch: bt}
				res, err := c.Copy(ctx, job, nil)
				if err == nil && !res.Held {
					err = fmt.Errorf("copy of %s not held by the batch", srcs[i])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// onOff runs the batch benchmark twice, with the optimisation (on) and
// without it (off).
func onOff(b *testing.B, n int, size int64, on, off batchSetup) {
	srcs := benchSources(b, benchDir(b), n, size)
	b.Run("on", func(b *testing.B) { benchBatch(b, srcs, size, on) })
	b.Run("off", func(b *testing.B) { benchBatch(b, srcs, size, off) })
}

// daemonSetup returns how the daemon sets a batch up today: every
// optimisation on.
func daemonSetup() batchSetup { return batchSetup{} }

// BenchmarkTrickKickHeld: 50 files of 4 MiB (the largest a batch takes)
// with and without sync_file_range starting their write-back as they are
// handed to the Batch.
func BenchmarkTrickKickHeld(b *testing.B) {
	off := daemonSetup()
	off.opts.noKick = true
	onOff(b, 50, 4<<20, daemonSetup(), off)
}

// BenchmarkTrickSyncfs: 500 files of 64 KiB made durable by one syncfs
// (which needs the kernel version check, see syncfsReportsErrors) and by
// an fsync of each.
func BenchmarkTrickSyncfs(b *testing.B) {
	off := daemonSetup()
	off.syncEach = true
	onOff(b, 500, 64<<10, daemonSetup(), off)
}

// BenchmarkTrickKickBytes: one file of 256 MiB copied alone (a batch of
// one, committed every DefaultSyncBytes as the daemon does), with and
// without sync_file_range starting the write-back every kickBytes.
func BenchmarkTrickKickBytes(b *testing.B) {
	const size = 256 << 20
	dir := benchDir(b)
	src := benchSource(b, dir, size)
	dst := filepath.Join(dir, "dst")
	for _, c := range []struct {
		name string
		o    Options
	}{{"on", Options{}}, {"off", Options{noKick: true}}} {
		b.Run(c.name, func(b *testing.B) {
			cp := NewCopier(NewThrottle(), c.o)
			for b.Loop() {
				b.StopTimer()
				if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
				unix.Sync()
				b.StartTimer()
				if _, err := cp.Copy(context.Background(), Job{Src: src, Dst: dst, Size: size}, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)*float64(b.N)/1e6/b.Elapsed().Seconds(), "MB/s")
		})
	}
}
