package main

// The throttle's sections: PERCENT as a share of wall time, the first
// second of a flush under BW, the flush's interference with a memory-bound
// computation, and the idle daemon.

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// triadEnv, when set to N, makes this program run N passes of a
// STREAM-triad-like kernel and print the seconds they took (see init): the
// interference section runs it pinned to one CPU.
const triadEnv = "SCR_BENCH_TRIAD"

// triadBytes is the memory of the triad's three arrays together.
const triadBytes = 1 << 30

func init() {
	if n, err := strconv.Atoi(os.Getenv(triadEnv)); err == nil && n > 0 {
		fmt.Println(triad(n).Seconds())
		os.Exit(0)
	}
}

// triad runs n passes of a[i] = b[i] + s*c[i] over three float64 arrays of
// triadBytes in all, and returns the time the passes took (not the setup).
func triad(n int) time.Duration {
	m := triadBytes / 8 / 3
	a, b, c := make([]float64, m), make([]float64, m), make([]float64, m)
	for i := range b {
		b[i], c[i] = float64(i), float64(m-i)
	}
	start := time.Now()
	s := 3.0
	for range n {
		for i := range a {
			a[i] = b[i] + s*c[i]
		}
		s += a[m/2] * 1e-30
	}
	return time.Since(start)
}

// busySampler samples the states of a process's threads: while any thread
// is runnable (R: running, or waiting for a CPU on a loaded machine) or
// waiting for I/O (D), and separately while any is in D.
type busySampler struct {
	pid                 int
	busy, ioWait, total int
}

// sample reads every thread's state once.
func (s *busySampler) sample() {
	dir := fmt.Sprintf("/proc/%d/task", s.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	s.total++
	var r, d bool
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			r = r || b[i+2] == 'R'
			d = d || b[i+2] == 'D'
		}
	}
	if r || d {
		s.busy++
	}
	if d {
		s.ioWait++
	}
}

// run samples every interval until stop is closed, then sends itself.
func (s *busySampler) run(every time.Duration, stop <-chan struct{}, done chan<- *busySampler) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			done <- s
			return
		case <-t.C:
			s.sample()
		}
	}
}

func (s *busySampler) share(n int) float64 {
	if s.total == 0 {
		return 0
	}
	return float64(n) / float64(s.total)
}

// pctMinWall is how long each PERCENT level is measured: its flush is run
// again until the runs add up to this much wall time. Samples every 2 ms
// over a 2 s flush (1 GiB at PERCENT 50 here) swing by more than a point
// between runs (51.5 % and 49.7 % at 50); over 10 s they do not.
const pctMinWall = 10 * time.Second

// dutyCycle measures PERCENT as SCR defines it: the share of wall time the
// daemon spends working, sampled from its threads' states by the kernel
// (not from its own accounting), and its CPU share, during unthrottled
// flushes, each level over at least pctMinWall.
func (b *bench) dutyCycle() error {
	if err := b.startDaemon(); err != nil {
		return err
	}
	src := filepath.Join(b.cache, "pct.bin")
	size := b.c.size
	if err := makeFile(src, size); err != nil {
		return err
	}
	defer os.Remove(src)
	fmt.Printf("## PERCENT: share of wall time working (%d MiB flushes, no BW limit, at least %v of them at each level)\n\n", size>>20, pctMinWall)
	fmt.Println("Working = some thread of the daemon running, runnable or waiting for I/O (state R or D in /proc/PID/task/*/stat, sampled every 2 ms), from RUN to DONE: the union over threads, as a share of wall time. CPU share is the daemon's user+system time from the kernel; I/O wait share the samples with a thread in D; their sum counts twice the moments when one thread computes while another waits for the disk, and leaves out time runnable but waiting for a CPU, which a loaded machine adds. A level's flush is run again until the runs add up to the time above; the shares are over all of them.")
	fmt.Println()
	fmt.Println("| PERCENT | flushes | wall s | working share (R\\|D sampled) | working − PERCENT | CPU share | I/O wait share | CPU + I/O wait | MB/s |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range []float64{5, 20, 50} {
		var wall, cpuTime time.Duration
		var busy, ioWait, total, runs int
		for runs == 0 || wall < pctMinWall {
			if err := warm(src); err != nil {
				return err
			}
			c0, err := b.cpuTime()
			if err != nil {
				return err
			}
			stop, done := make(chan struct{}), make(chan *busySampler, 1)
			go (&busySampler{pid: b.daemon.Process.Pid}).run(2*time.Millisecond, stop, done)
			d, err := b.flush(src, filepath.Join(b.pfs, "pct.bin"), size, 0, p)
			close(stop)
			s := <-done
			if err != nil {
				return err
			}
			c1, err := b.cpuTime()
			if err != nil {
				return err
			}
			wall, cpuTime, runs = wall+d, cpuTime+c1-c0, runs+1
			busy, ioWait, total = busy+s.busy, ioWait+s.ioWait, total+s.total
			os.Remove(filepath.Join(b.pfs, "pct.bin"))
		}
		all := busySampler{busy: busy, ioWait: ioWait, total: total}
		cpu, io := 100*cpuTime.Seconds()/wall.Seconds(), 100*all.share(ioWait)
		share := 100 * all.share(busy)
		fmt.Printf("| %.0f | %d | %.2f | %.1f %% | %+.1f | %.1f %% | %.1f %% | %.1f %% | %.0f |\n", p, runs, wall.Seconds(), share, share-p,
			cpu, io, cpu+io, mbps(int64(runs)*size, wall))
		b.record(figure{goal: fmt.Sprintf("PERCENT %.0f: working share of wall time", p), unit: "%", value: share, sense: near, target: p})
		b.record(figure{goal: fmt.Sprintf("PERCENT %.0f: CPU share", p), unit: "%", value: cpu, sense: lower, resolution: tickShare(wall)})
	}
	fmt.Println()
	return nil
}

// oneSecondFlush measures the start of a flush under BW: the daemon sits
// idle for a few seconds with the limit set (a bucket that filled while
// idle would start the flush with a burst), then flushes one second's worth.
func (b *bench) oneSecondFlush() error {
	if err := b.startDaemon(); err != nil {
		return err
	}
	fmt.Println("## One second's worth at the limit, after the daemon idled 3 s with BW set (RUN to DONE, and first to last byte written)")
	fmt.Println()
	fmt.Println("| BW limit | RUN to DONE | achieved/limit | first to last write: achieved/limit |")
	fmt.Println("|---:|---:|---:|---:|")
	for _, limit := range []float64{20e6, 100e6, 500e6} {
		size := int64(limit)
		src, dst := filepath.Join(b.cache, "burst.bin"), filepath.Join(b.pfs, "burst.bin")
		if err := makeFile(src, size); err != nil {
			return err
		}
		if err := warm(src); err != nil {
			return err
		}
		if _, _, err := b.store.Update(func(t *hashfile.Tree) error {
			t.Unset(transfer.KeyFiles)
			transfer.SetBW(t, limit)
			return nil
		}); err != nil {
			return err
		}
		time.Sleep(3 * time.Second) // the idle spell is the experiment
		samples := make(chan []sample, 1)
		stop := make(chan struct{})
		go func() { samples <- b.sampleWrites(5*time.Millisecond, stop) }()
		d, err := b.flush(src, dst, size, limit, 0)
		close(stop)
		s := <-samples
		if err != nil {
			return err
		}
		first, last := writeSpan(s)
		span := "-"
		if last.at.After(first.at) {
			r := float64(last.bytes-first.bytes) / last.at.Sub(first.at).Seconds() / limit
			span = fmt.Sprintf("%.3f", r)
			b.record(figure{goal: fmt.Sprintf("one second's worth at BW %.0f MB/s after 3 s idle: first to last write / limit", limit/1e6), unit: "×", value: r, sense: near, target: 1})
		}
		fmt.Printf("| %.0f MB/s | %.3f s | %.3f | %s |\n", limit/1e6, d.Seconds(), float64(size)/d.Seconds()/limit, span)
		os.Remove(src)
		os.Remove(dst)
	}
	fmt.Println()
	return nil
}

// writeSpan returns the samples where the counter first and last moved.
func writeSpan(s []sample) (first, last sample) {
	for i := 1; i < len(s); i++ {
		if s[i].bytes != s[i-1].bytes {
			if first.at.IsZero() {
				first = s[i-1]
			}
			last = s[i]
		}
	}
	return first, last
}

// interference times a memory- and CPU-bound computation (triad, over
// triadBytes, pinned to CPU 0) alone and beside a flush at 200 MB/s by the
// daemon, by cp and by rsync --bwlimit, each pinned to CPU 1, in
// interleaved rounds.
func (b *bench) interference() error {
	if numCPU() < 2 {
		fmt.Print("## Interference: skipped, fewer than 2 CPUs\n\n")
		return nil
	}
	for _, tool := range []string{"taskset", "rsync"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Printf("## Interference: skipped, no %s\n\n", tool)
			return nil
		}
	}
	const limit = 200e6
	size := b.c.interferenceSize
	src := filepath.Join(b.cache, "interf.bin")
	if err := makeFile(src, size); err != nil {
		return err
	}
	defer os.Remove(src)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	runTriad := func(n int) (time.Duration, error) {
		cmd := exec.Command("taskset", "-c", "0", self)
		cmd.Env = append(os.Environ(), triadEnv+"="+strconv.Itoa(n))
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("triad: %w", err)
		}
		sec, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		return time.Duration(sec * float64(time.Second)), err
	}
	// About 3 s of triad per run.
	one, err := runTriad(2)
	if err != nil {
		return err
	}
	passes := max(2, int(math.Round(2*3/one.Seconds())))
	dst := filepath.Join(b.pfs, "interf.bin")
	cleanup := func() {
		os.Remove(dst)
		os.Remove(filepath.Join(filepath.Dir(dst), ".interf.bin.scrpart"))
		if m, _ := filepath.Glob(filepath.Join(b.pfs, ".interf.bin.*")); len(m) > 0 {
			for _, p := range m {
				os.Remove(p)
			}
		}
	}
	// started reports when the contender has begun writing dst (or a
	// partial copy beside it).
	started := func() bool {
		m, _ := filepath.Glob(filepath.Join(b.pfs, "*interf.bin*"))
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
				return true
			}
		}
		return false
	}
	type contender struct {
		name  string
		start func() (stop func(), err error)
	}
	contenders := []contender{
		{"alone", func() (func(), error) { return func() {}, nil }},
		{fmt.Sprintf("scr-transferd, BW %.0f MB/s", limit/1e6), func() (func(), error) {
			if err := b.startDaemonPinned("1"); err != nil {
				return nil, err
			}
			if _, _, err := b.store.Update(func(t *hashfile.Tree) error {
				t.Unset(transfer.KeyFiles)
				transfer.AddFile(t, src, dst, size)
				transfer.SetBW(t, limit)
				transfer.SetCommand(t, transfer.Run)
				return nil
			}); err != nil {
				return nil, err
			}
			return b.stopDaemon, nil
		}},
		{"cp (no limit)", func() (func(), error) { return startPinned("cp", src, dst) }},
		{fmt.Sprintf("rsync --bwlimit=%d (KiB/s)", int(limit)/1024), func() (func(), error) {
			return startPinned("rsync", fmt.Sprintf("--bwlimit=%d", int(limit)/1024), src, dst)
		}},
	}
	times := make([][]time.Duration, len(contenders))
	for r := range b.c.interferenceRounds {
		for k := range contenders {
			i := (k + r) % len(contenders) // a different order every round
			c := contenders[i]
			cleanup()
			stop, err := c.start()
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if i > 0 {
				deadline := time.Now().Add(30 * time.Second)
				for !started() && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			}
			d, err := runTriad(passes)
			stop()
			if err != nil {
				return err
			}
			times[i] = append(times[i], d)
		}
	}
	cleanup()
	alone := median(times[0])
	fmt.Printf("## Interference: triad over %d MiB on CPU 0 (%d passes, median of %d interleaved rounds), beside a %d MiB flush on CPU 1\n\n",
		triadBytes>>20, passes, b.c.interferenceRounds, size>>20)
	fmt.Println("| beside | triad s (median) | slowdown (median) | slowdown min – max |")
	fmt.Println("|---|---:|---:|---:|")
	for i, c := range contenders {
		lo, hi := slices.Min(times[i]), slices.Max(times[i])
		fmt.Printf("| %s | %.3f | %+.1f %% | %+.1f %% – %+.1f %% |\n", c.name, median(times[i]).Seconds(),
			100*(median(times[i]).Seconds()/alone.Seconds()-1), 100*(lo.Seconds()/alone.Seconds()-1), 100*(hi.Seconds()/alone.Seconds()-1))
	}
	fmt.Println()
	// The triad alone varies by its own spread: a slowdown closer than that
	// is not told apart.
	spread := 100 * (slices.Max(times[0]) - slices.Min(times[0])).Seconds() / alone.Seconds()
	b.record(figure{goal: contenders[1].name + ": triad slowdown beside it (median)", unit: "%", value: 100 * (median(times[1]).Seconds()/alone.Seconds() - 1), sense: lower, resolution: spread})
	return nil
}

// startPinned starts a command on CPU 1 and returns a function that kills
// it and waits for it.
func startPinned(name string, args ...string) (func(), error) {
	cmd := exec.Command("taskset", append([]string{"-c", "1", name}, args...)...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

// startDaemonPinned starts a fresh daemon on the given CPUs.
func (b *bench) startDaemonPinned(cpus string) error {
	return b.startDaemonCmd([]string{"taskset", "-c", cpus})
}

// idleShm measures a daemon with nothing to do whose transfer file lives on
// /dev/shm (tmpfs: inotify sees every change, so nothing is polled): CPU,
// memory and how often its threads woke, from the moment it recorded STATE
// STOPPED.
func (b *bench) idleShm() error {
	shm, err := os.MkdirTemp("/dev/shm", "scr-bench-")
	if err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	defer os.RemoveAll(shm)
	saved, savedStore := b.transfer, b.store
	b.transfer = filepath.Join(shm, "ctl", "transfer.scrinfo")
	b.store = hashfile.NewStore(b.transfer, hashfile.Flock)
	defer func() { b.stopDaemon(); b.transfer, b.store = saved, savedStore }()
	if err := os.MkdirAll(filepath.Dir(b.transfer), 0o700); err != nil {
		return err
	}
	if err := b.startDaemon(); err != nil {
		return err
	}
	c0, err := b.cpuTime()
	if err != nil {
		return err
	}
	w0 := wakeups(b.daemon.Process.Pid)
	start := time.Now()
	time.Sleep(b.c.idle)
	c1, err := b.cpuTime()
	if err != nil {
		return err
	}
	wall := time.Since(start)
	w1 := wakeups(b.daemon.Process.Pid)
	mem, err := b.proc.MemoryInfo()
	if err != nil {
		return err
	}
	fmt.Printf("## Idle daemon, transfer file on /dev/shm, STOPPED for %v (default --reread 60s)\n\n", b.c.idle)
	fmt.Println("| CPU | share of one core | RSS | thread wake-ups (context switches) |")
	fmt.Println("|---:|---:|---:|---:|")
	fmt.Printf("| %.3f s | %.4f %% | %.1f MB | %d (%.2f/s) |\n\n", (c1 - c0).Seconds(), (c1-c0).Seconds()/wall.Seconds()*100,
		float64(mem.RSS)/1e6, w1-w0, float64(w1-w0)/wall.Seconds())
	b.record(figure{goal: fmt.Sprintf("idle %v: CPU share of one core", b.c.idle), unit: "%", value: (c1 - c0).Seconds() / wall.Seconds() * 100, sense: lower, resolution: tickShare(wall)})
	b.record(figure{goal: "idle: RSS", unit: "MB", value: float64(mem.RSS) / 1e6, sense: lower})
	return nil
}

// wakeups returns the context switches of all threads of pid so far.
func wakeups(pid int) int64 {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			for _, k := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if v, ok := strings.CutPrefix(sc.Text(), k); ok {
					x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += x
				}
			}
		}
		f.Close()
	}
	return n
}
