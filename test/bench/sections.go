package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// copyThroughput compares an unthrottled flush with cp (followed by
// `sync FILE`, since the daemon's copy is durable) and dd conv=fsync.
func (b *bench) copyThroughput() error {
	src := filepath.Join(b.cache, "big.bin")
	if err := makeFile(src, b.c.size); err != nil {
		return err
	}
	defer os.Remove(src)
	if err := b.startDaemon(); err != nil {
		return err
	}
	var cp, dd, daemon []time.Duration
	for range b.c.runs {
		dst := filepath.Join(b.pfs, "cp.bin")
		if err := warm(src); err != nil {
			return err
		}
		t1, err := timeCmd("cp", src, dst)
		if err != nil {
			return err
		}
		t2, err := timeCmd("sync", dst)
		if err != nil {
			return err
		}
		cp = append(cp, t1+t2)
		os.Remove(dst)

		dst = filepath.Join(b.pfs, "dd.bin")
		if err := warm(src); err != nil {
			return err
		}
		t, err := timeCmd("dd", "if="+src, "of="+dst, "bs=1M", "conv=fsync", "status=none")
		if err != nil {
			return err
		}
		dd = append(dd, t)
		os.Remove(dst)

		dst = filepath.Join(b.pfs, "daemon.bin")
		if err := warm(src); err != nil {
			return err
		}
		t, err = b.flush(src, dst, b.c.size, 0, 0)
		if err != nil {
			return err
		}
		daemon = append(daemon, t)
		os.Remove(dst)
	}
	ref := mbps(b.c.size, median(cp))
	fmt.Printf("## Unthrottled flush of one %d MiB file (median of %d; source in page cache for all)\n\n", b.c.size>>20, b.c.runs)
	fmt.Println("| copy | MB/s | vs cp |")
	fmt.Println("|---|---:|---:|")
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"cp + sync FILE", cp}, {"dd bs=1M conv=fsync", dd}, {"scr-transferd (RUN to DONE)", daemon}} {
		v := mbps(b.c.size, median(r.d))
		fmt.Printf("| %s | %.0f | %.2f× |\n", r.name, v, v/ref)
	}
	fmt.Println()
	b.record(figure{goal: fmt.Sprintf("unthrottled flush of %d MiB: speed vs cp + sync FILE", b.c.size>>20), unit: "×", value: mbps(b.c.size, median(daemon)) / ref, sense: higher})
	b.record(figure{goal: fmt.Sprintf("unthrottled flush of %d MiB: MB/s (the daemon's own)", b.c.size>>20), unit: "MB/s", value: mbps(b.c.size, median(daemon)), sense: higher})
	return nil
}

// bandwidth checks the achieved rate against BW, over the whole flush and
// over every 5 s window (sampled from the daemon's write counter).
func (b *bench) bandwidth() error {
	if err := b.startDaemon(); err != nil {
		return err
	}
	const seconds = 10
	fmt.Printf("## Bandwidth limit (each flush sized for about %d s at its limit)\n\n", seconds)
	fmt.Println("| BW limit | achieved over the flush | achieved/limit | 5 s windows: min/limit | max/limit |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	for _, limit := range []float64{20e6, 100e6, 500e6} {
		size := int64(limit * seconds)
		src := filepath.Join(b.cache, "bw.bin")
		if err := makeFile(src, size); err != nil {
			return err
		}
		if err := warm(src); err != nil {
			return err
		}
		samples := make(chan []sample, 1)
		stop := make(chan struct{})
		go func() { samples <- b.sampleWrites(100*time.Millisecond, stop) }()
		d, err := b.flush(src, filepath.Join(b.pfs, "bw.bin"), size, limit, 0)
		close(stop)
		s := <-samples
		if err != nil {
			return err
		}
		lo, hi := windowRates(s, 5*time.Second)
		achieved := float64(size) / d.Seconds()
		fmt.Printf("| %.0f MB/s | %.1f MB/s | %.3f | %.3f | %.3f |\n", limit/1e6, achieved/1e6, achieved/limit, lo/limit, hi/limit)
		for _, w := range []struct {
			name string
			v    float64
		}{{"slowest", lo}, {"fastest", hi}} {
			b.record(figure{goal: fmt.Sprintf("BW %.0f MB/s: %s 5 s window / limit", limit/1e6, w.name), unit: "×", value: w.v / limit, sense: near, target: 1})
		}
		os.Remove(src)
		os.Remove(filepath.Join(b.pfs, "bw.bin"))
	}
	fmt.Println()
	return nil
}

type sample struct {
	at    time.Time
	bytes int64
}

// sampleWrites records the daemon's written-bytes counter (wchar of
// /proc/PID/io) until stop is closed.
func (b *bench) sampleWrites(every time.Duration, stop <-chan struct{}) []sample {
	var s []sample
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := wchar(b.daemon.Process.Pid); err == nil {
			s = append(s, sample{time.Now(), n})
		}
		select {
		case <-stop:
			return s
		case <-t.C:
		}
	}
}

func wchar(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wchar: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no wchar in /proc/%d/io", pid)
}

// windowRates returns the lowest and highest rate over windows of width w
// that lie entirely within the busy part of the samples (first to last
// change of the counter).
func windowRates(s []sample, w time.Duration) (lo, hi float64) {
	first, last := -1, -1
	for i := 1; i < len(s); i++ {
		if s[i].bytes != s[i-1].bytes {
			if first < 0 {
				first = i - 1
			}
			last = i
		}
	}
	if first < 0 {
		return 0, 0
	}
	for i := first; i <= last; i++ {
		for j := i + 1; j <= last; j++ {
			if s[j].at.Sub(s[i].at) >= w {
				r := float64(s[j].bytes-s[i].bytes) / s[j].at.Sub(s[i].at).Seconds()
				if lo == 0 || r < lo {
					lo = r
				}
				hi = max(hi, r)
				break
			}
		}
	}
	return lo, hi
}

// runLatency measures the time from the library's RUN to the first WRITTEN
// of a small file, which the daemon records once the file is durable.
func (b *bench) runLatency() error {
	if err := b.startDaemon(); err != nil {
		return err
	}
	src := filepath.Join(b.cache, "small.bin")
	if err := makeFile(src, 4096); err != nil {
		return err
	}
	var lat []time.Duration
	for i := range b.c.latency {
		dest := filepath.Join(b.pfs, fmt.Sprintf("small.%d", i))
		if _, _, err := b.store.Update(func(t *hashfile.Tree) error {
			t.Unset(transfer.KeyFiles)
			transfer.AddFile(t, src, dest, 4096)
			return nil
		}); err != nil {
			return err
		}
		start := time.Now()
		if _, _, err := b.store.Update(func(t *hashfile.Tree) error { transfer.SetCommand(t, transfer.Run); return nil }); err != nil {
			return err
		}
		if err := b.waitFor(time.Minute, func(v transfer.View) bool { return len(v.Files) == 1 && v.Files[0].Written > 0 }); err != nil {
			return err
		}
		lat = append(lat, time.Since(start))
		if err := b.waitFor(time.Minute, func(v transfer.View) bool { return v.Done }); err != nil {
			return err
		}
	}
	fmt.Printf("## RUN to first WRITTEN (4 KiB file, %d trials; includes fsync, rename and directory fsync)\n\n", len(lat))
	fmt.Printf("| median | min | max |\n|---:|---:|---:|\n| %.1f ms | %.1f ms | %.1f ms |\n\n",
		ms(median(lat)), ms(minDur(lat)), ms(maxDur(lat)))
	// waitFor polls every millisecond: finer differences are not measured.
	b.record(figure{goal: "RUN → first WRITTEN, 4 KiB (median)", unit: "ms", value: ms(median(lat)), sense: lower, resolution: 1})
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func minDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func maxDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}
