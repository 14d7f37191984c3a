// Command bench measures scr-transferd against cp and dd on this machine, in
// one run on the same files, and prints the performance table of
// docs/PERFORMANCE.md:
//
//	go run ./test/bench [-dir DIR] [-size 512MiB] [-idle 120s] [-runs 3] [-only SECTIONS] [-scr-flock DIR -scr-fcntl DIR]
//	go run ./test/bench -baseline REV [-baseline-rounds 2] ...
//
// With -baseline (or -baseline-bin), each section that starts a daemon
// runs for the daemon built at REV and for this tree's, interleaved, and
// their figures are compared goal by goal (see compare.go).
//
// Every figure is a ratio against a reference measured in the same run, or
// against the limit the daemon was given, because the machine is shared and
// absolute figures drift.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v3/process"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	dir     string
	size    int64
	runs    int
	idle    time.Duration
	latency int
	only    string

	interferenceSize   int64 // bytes of the flush beside the triad
	interferenceRounds int
	entries            []int

	autoSize           int64   // bytes of each flush of the BW auto section
	autoCapacity       float64 // bytes/s of its shared destination
	scrFlock, scrFcntl string  // SCR 1.2.2 builds for the scr section (scr.go); "" if none
	scrSize            int64   // bytes of its unlimited flush

	baseline, baselineBin string // the old daemon: a git revision, or a binary
	baselineRounds        int
}

func run() error {
	var c config
	var size string
	flag.StringVar(&c.dir, "dir", os.TempDir(), "directory for the cache, PFS and control files (one file system, like a node's local disk)")
	flag.StringVar(&size, "size", "512MiB", "size of the file for the throughput and throttle runs")
	flag.IntVar(&c.runs, "runs", 3, "repetitions of each throughput measurement (the median is reported)")
	flag.DurationVar(&c.idle, "idle", 120*time.Second, "how long to watch the idle daemon's CPU, memory and wake-ups")
	flag.IntVar(&c.latency, "latency-trials", 20, "RUN to first WRITTEN trials")
	var isize string
	flag.StringVar(&isize, "interference-size", "4GiB", "size of the flush beside the triad in the interference section")
	flag.IntVar(&c.interferenceRounds, "interference-rounds", 5, "interleaved rounds of the interference section (the median is reported)")
	flag.StringVar(&c.only, "only", "", "comma-separated sections to run: copy,bw,percent,burst,latency,idle,interference,verify,sparse,hashfile,many,auto,scr (default all)")
	c.baselineFlags()
	entries := flag.String("entries", "1000,10000,100000", "entry counts of 1 KiB files for the many-files section")
	asize := flag.String("auto-size", "512MiB", "size of each flush of the BW auto section")
	flag.Float64Var(&c.autoCapacity, "auto-capacity", 100e6, "bandwidth in bytes/s of the BW auto section's shared FUSE destination")
	flag.StringVar(&c.scrFlock, "scr-flock", os.Getenv("SCR_LIB_FLOCK"), "SCR 1.2.2 FLOCK build (test/scrlib/build.sh) for the scr section")
	flag.StringVar(&c.scrFcntl, "scr-fcntl", os.Getenv("SCR_LIB_FCNTL"), "SCR 1.2.2 FCNTL build for the scr section")
	ssize := flag.String("scr-size", "256MiB", "size of the scr section's unlimited flush")
	flag.Parse()
	var err error
	if c.scrSize, err = parseSize(*ssize); err != nil {
		return fmt.Errorf("-scr-size: %w", err)
	}
	n, err := parseSize(size)
	if err != nil {
		return fmt.Errorf("-size: %w", err)
	}
	c.size = n
	if c.interferenceSize, err = parseSize(isize); err != nil {
		return fmt.Errorf("-interference-size: %w", err)
	}
	if c.autoSize, err = parseSize(*asize); err != nil {
		return fmt.Errorf("-auto-size: %w", err)
	}
	for _, e := range strings.Split(*entries, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(e))
		if err != nil || k <= 0 {
			return fmt.Errorf("-entries: %q is not a count", e)
		}
		c.entries = append(c.entries, k)
	}
	work, err := os.MkdirTemp(c.dir, "scr-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b, err := newBench(work, c)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Printf("# scr-transferd benchmark — %s, %d CPUs, work dir %s\n\n", time.Now().UTC().Format(time.RFC3339), numCPU(), c.dir)
	sections := []struct {
		name string
		fn   func() error
	}{
		{"copy", b.copyThroughput},
		{"bw", b.bandwidth},
		{"percent", b.dutyCycle},
		{"burst", b.oneSecondFlush},
		{"latency", b.runLatency},
		{"idle", b.idleShm},
		{"interference", b.interference},
		{"verify", b.verifyThroughput},
		{"sparse", b.sparseFlush},
		{"hashfile", b.hashfileBench},
		{"many", b.manyFiles},
		{"auto", b.bwAuto},
		{"scr", b.scrPeer},
	}
	start := time.Now()
	for _, s := range sections {
		if c.only != "" && !slices.Contains(strings.Split(c.only, ","), s.name) {
			continue
		}
		if err := b.runSection(s.name, s.fn); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	b.summary(start)
	return nil
}

// bench holds the binaries and a running daemon.
type bench struct {
	c        config
	work     string
	bin      string    // holds this tree's binaries: scr-transferd and what sections build
	exe      daemonBin // the daemon startDaemon starts
	cache    string
	pfs      string
	transfer string
	store    *hashfile.Store
	daemon   *exec.Cmd
	proc     *process.Process
	log      *os.File

	cmp    *comparison // nil without a baseline
	figs   []figure    // what the sections measured with exe (see record)
	starts int         // daemons started with exe
}

func newBench(work string, c config) (*bench, error) {
	b := &bench{
		c:        c,
		work:     work,
		bin:      filepath.Join(work, "bin"),
		cache:    filepath.Join(work, "cache"),
		pfs:      filepath.Join(work, "pfs"),
		transfer: filepath.Join(work, "ctl", "transfer.scrinfo"),
	}
	for _, d := range []string{b.bin, b.cache, b.pfs, filepath.Dir(b.transfer)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if err := b.daemons(root); err != nil {
		return nil, err
	}
	b.store = hashfile.NewStore(b.transfer, hashfile.Flock)
	return b, nil
}

// startDaemon starts a fresh daemon on an empty transfer file with the
// default settings.
func (b *bench) startDaemon() error { return b.startDaemonWith() }

func (b *bench) ctx() context.Context { return context.Background() }

// startDaemonWith starts a fresh daemon with the given flags.
func (b *bench) startDaemonWith(flags ...string) error { return b.startDaemonCmd(nil, flags...) }

// startDaemonCmd starts a fresh daemon of b.exe with the given flags, as an
// argument of the command prefix (such as taskset) if there is one. The
// transfer file's directory is created first: a daemon refuses a missing
// one unless told otherwise, and an older one has no flag to tell it.
func (b *bench) startDaemonCmd(prefix []string, flags ...string) error {
	b.stopDaemon()
	if err := b.exe.check(flags); err != nil {
		return err
	}
	_ = os.Remove(b.transfer)
	if err := os.MkdirAll(filepath.Dir(b.transfer), 0o755); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(b.work, "daemon.log"))
	if err != nil {
		return err
	}
	b.log = log
	argv := slices.Concat(prefix, []string{b.exe.path}, flags, []string{b.transfer})
	cmd := exec.Command(argv[0], argv[1:]...)
	b.starts++
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	b.daemon = cmd
	p, err := process.NewProcess(int32(cmd.Process.Pid))
	if err != nil {
		return err
	}
	b.proc = p
	return b.waitFor(30*time.Second, func(v transfer.View) bool { return v.State == transfer.Stopped })
}

func (b *bench) stopDaemon() {
	if b.daemon == nil {
		return
	}
	_, _, _ = b.store.Update(func(t *hashfile.Tree) error { transfer.SetCommand(t, transfer.Exit); return nil })
	done := make(chan struct{})
	go func() { _ = b.daemon.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.daemon.Process.Kill()
		<-done
	}
	b.daemon = nil
	b.log.Close()
}

func (b *bench) close() { b.stopDaemon() }

// flush makes the daemon copy src to dest with the given limits and
// returns the time from RUN to DONE.
func (b *bench) flush(src, dest string, size int64, bw, percent float64) (time.Duration, error) {
	_ = os.Remove(dest)
	_, _, err := b.store.Update(func(t *hashfile.Tree) error {
		t.Unset(transfer.KeyFiles)
		transfer.AddFile(t, src, dest, size)
		transfer.SetBW(t, bw)
		transfer.SetPercent(t, percent)
		return nil
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, _, err := b.store.Update(func(t *hashfile.Tree) error { transfer.SetCommand(t, transfer.Run); return nil }); err != nil {
		return 0, err
	}
	if err := b.waitFor(time.Hour, func(v transfer.View) bool { return v.Done && !v.HasPending() }); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// waitFor polls the transfer file every millisecond until cond holds.
func (b *bench) waitFor(timeout time.Duration, cond func(transfer.View) bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if t, err := b.store.Read(); err == nil {
			v := transfer.Read(t)
			for _, f := range v.Files {
				if f.Error != "" {
					return fmt.Errorf("daemon reports %s: %s", f.Src, f.Error)
				}
			}
			if cond(v) {
				return nil
			}
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("timed out waiting for the daemon")
}

// cpuTime returns the daemon's user+system CPU time.
func (b *bench) cpuTime() (time.Duration, error) {
	t, err := b.proc.Times()
	if err != nil {
		return 0, err
	}
	return time.Duration((t.User + t.System) * float64(time.Second)), nil
}

// makeFile writes size bytes of incompressible data.
func makeFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var x uint64 = 0x9e3779b97f4a7c15
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := 0; i+8 <= len(buf); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			for j := range 8 {
				buf[i+j] = byte(x >> (8 * j))
			}
		}
		n := min(int64(len(buf)), size-off)
		if _, err := f.Write(buf[:n]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// warm reads a file so every contender starts with it in the page cache.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}

func timeCmd(name string, args ...string) (time.Duration, error) {
	start := time.Now()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", name, err, out)
	}
	return time.Since(start), nil
}

// median returns the middle value of x (the upper one of an even count).
func median[T cmp.Ordered](x []T) T {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

func mbps(size int64, d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("run bench inside the scr-transferd module")
		}
	}
}

func parseSize(s string) (int64, error) {
	u := strings.TrimSpace(s)
	mult := int64(1)
	for _, suf := range []struct {
		s string
		m int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if strings.HasSuffix(u, suf.s) {
			u, mult = strings.TrimSuffix(u, suf.s), suf.m
			break
		}
	}
	var n int64
	if _, err := fmt.Sscan(u, &n); err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a size like 512MiB", s)
	}
	return n * mult, nil
}

func numCPU() int {
	n, err := exec.Command("nproc").Output()
	if err != nil {
		return 0
	}
	var c int
	fmt.Sscan(strings.TrimSpace(string(n)), &c)
	return c
}
