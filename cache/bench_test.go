package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/cache/cachetest"
)

// BenchmarkVerify measures verification throughput on a 128 MiB FTI-FF
// checkpoint and a 108 MiB SciDAC gauge file (a single-precision SU(3)
// field on a 16x16x16x96 lattice), and in the same run the
// throughput of md5sum and cksum reading the same page-cached files, so the
// MB/s columns compare directly:
//
//	go test -run '^$' -bench Verify -benchtime 10x -count 3 ./cache/
//
// The files are written to a temporary directory, or kept in
// $CACHE_BENCH_DIR when that is set.
func BenchmarkVerify(b *testing.B) {
	dir := os.Getenv("CACHE_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	// FTI-FF: four variables of 32 MiB.
	w := &cachetest.FTIWriter{Order: binary.LittleEndian}
	fti := w.Checkpoint(1, []cachetest.FTIVar{{ID: 1, Size: 32 << 20}, {ID: 2, Size: 32 << 20}, {ID: 3, Size: 32 << 20}, {ID: 4, Size: 32 << 20}})
	// SciDAC: an SU(3) single-precision gauge field, 288 bytes per site.
	dims := []int{16, 16, 16, 96}
	sites := volumeOf(dims)
	gauge := scidacField{typesize: 72, datacount: 4, kind: recordField, data: pattern(sites*288, 1), ranks: seqRanks(sites)}
	files := map[string][]byte{"bench.fti": fti, "bench.lime": scidacSingle(dims, gauge)}
	writeFiles(b, dir, files)
	// Let writeback of the new files finish before anything is timed; the
	// files stay in the page cache.
	syscall.Sync()
	for _, name := range []string{"bench.fti", "bench.lime"} {
		path := filepath.Join(dir, name)
		size := int64(len(files[name]))
		kind := map[string]Kind{"bench.fti": FTIFF, "bench.lime": LIME}[name]
		b.Run(string(kind)+"/cache", func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				rep, err := Inspect(context.Background(), path)
				if err != nil || rep.Kind != kind {
					b.Fatalf("%v %v", rep, err)
				}
			}
		})
		for _, tool := range []string{"md5sum", "cksum"} {
			b.Run(string(kind)+"/"+tool, func(b *testing.B) {
				bin, err := exec.LookPath(tool)
				if err != nil {
					b.Skip(err)
				}
				b.SetBytes(size)
				for b.Loop() {
					if out, err := exec.Command(bin, path).CombinedOutput(); err != nil {
						b.Fatalf("%s: %v: %s", tool, err, out)
					}
				}
			})
		}
	}
}

// BenchmarkVerifyVsTools interleaves, in every iteration, one verification
// by Inspect with one run of md5sum and one of cksum over the same
// page-cached file, so load from other processes hits all three alike. It
// reports the throughput of each and the ratios of ours to theirs, by wall
// time (x-md5sum, x-cksum) and by CPU time (x-md5sum-cpu, x-cksum-cpu);
// above 1 means faster than the tool. ns/op is the time of all three
// together.
//
//	go test -run '^$' -bench VerifyVsTools -benchtime 20x ./cache/
func BenchmarkVerifyVsTools(b *testing.B) {
	md5sum, err1 := exec.LookPath("md5sum")
	cksum, err2 := exec.LookPath("cksum")
	if err1 != nil || err2 != nil {
		b.Skip("md5sum or cksum not found")
	}
	dir := b.TempDir()
	w := &cachetest.FTIWriter{Order: binary.LittleEndian}
	fti := w.Checkpoint(1, []cachetest.FTIVar{{ID: 1, Size: 32 << 20}, {ID: 2, Size: 32 << 20}, {ID: 3, Size: 32 << 20}, {ID: 4, Size: 32 << 20}})
	dims := []int{16, 16, 16, 96}
	sites := volumeOf(dims)
	gauge := scidacField{typesize: 72, datacount: 4, kind: recordField, data: pattern(sites*288, 1), ranks: seqRanks(sites)}
	files := map[string][]byte{"bench.fti": fti, "bench.lime": scidacSingle(dims, gauge)}
	writeFiles(b, dir, files)
	syscall.Sync()
	for _, name := range []string{"bench.fti", "bench.lime"} {
		path := filepath.Join(dir, name)
		mb := float64(len(files[name])) / 1e6
		b.Run(name, func(b *testing.B) {
			// Wall time and CPU time (user+system) of each; CPU time is
			// the steadier measure on a loaded machine.
			var ours, md5t, ckt, oursCPU, md5CPU, ckCPU time.Duration
			tool := func(wall, cpu *time.Duration, bin string) {
				cmd := exec.Command(bin, path)
				start := time.Now()
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				*wall += time.Since(start)
				*cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			}
			for b.Loop() {
				cpu0 := processCPU()
				start := time.Now()
				if _, err := Inspect(context.Background(), path); err != nil {
					b.Fatal(err)
				}
				ours += time.Since(start)
				oursCPU += processCPU() - cpu0
				tool(&md5t, &md5CPU, md5sum)
				tool(&ckt, &ckCPU, cksum)
			}
			n := float64(b.N)
			b.ReportMetric(mb*n/ours.Seconds(), "cache-MB/s")
			b.ReportMetric(mb*n/md5t.Seconds(), "md5sum-MB/s")
			b.ReportMetric(mb*n/ckt.Seconds(), "cksum-MB/s")
			b.ReportMetric(md5t.Seconds()/ours.Seconds(), "x-md5sum")
			b.ReportMetric(ckt.Seconds()/ours.Seconds(), "x-cksum")
			b.ReportMetric(md5CPU.Seconds()/oursCPU.Seconds(), "x-md5sum-cpu")
			b.ReportMetric(ckCPU.Seconds()/oursCPU.Seconds(), "x-cksum-cpu")
		})
	}
}

// processCPU returns the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProbeFTIFFTail measures the look for an FTI-FF file meta in
// the last 64 KiB of a file that has none, which the check of every
// source makes: random bytes (most checkpoints), zeros, and lowercase hex
// digits (the worst case, a step of one byte at a time). The bytes are in
// memory, as flush hands over a small source it read whole.
//
//	go test -run '^$' -bench ProbeFTIFFTail -count 5 ./cache/
func BenchmarkProbeFTIFFTail(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		fill func(i int) byte
	}{
		{"random", func(int) byte { return byte(rng.IntN(256)) }},
		{"zeros", func(int) byte { return 0 }},
		{"hex", func(int) byte { return "0123456789abcdef"[rng.IntN(16)] }},
	} {
		data := make([]byte, ftiScanWindow+ftiMetaSize)
		for i := range data {
			data[i] = tc.fill(i)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				s := &source{ctx: context.Background(), r: wholeBytes{bytes.NewReader(data), data}, size: int64(len(data)), path: "x"}
				if p, err := probeFTIFFTail(s); err != nil || p.found {
					b.Fatalf("probe: found %v, error %v", p.found, err)
				}
			}
		})
	}
}

// wholeBytes is a reader of bytes in memory that hands them over without
// a copy, as flush's reader of a source it read whole does (see byteser).
type wholeBytes struct {
	*bytes.Reader
	b []byte
}

func (w wholeBytes) Bytes() []byte { return w.b }
