package main

// The BW auto section: a flush to a destination of finite bandwidth shared
// with an application on the same node, as on a busy parallel file system.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/fusetest"
)

// appEnv, when set to a directory, makes this program the application of
// the BW auto section (see init): every appPeriod it writes appBytes to its
// output file in that directory and fsyncs it, until its standard input
// is closed (a signal would interrupt the operation under way), then prints
// each operation's start (ns since its own start) and latency (ns), one
// operation a line.
const appEnv = "SCR_BENCH_APP"

const (
	appBytes  = 4 << 20
	appPeriod = 200 * time.Millisecond
	// appSlots is how many appBytes blocks the output file holds: the
	// application overwrites them in turn, as a code rewriting its restart
	// file does, so the destination does not fill.
	appSlots = 8
	// appAloneOps is the least number of operations of the application
	// alone, the reference of its latency.
	appAloneOps = 100
)

func init() {
	if dir := os.Getenv(appEnv); dir != "" {
		if err := application(dir); err != nil {
			fmt.Fprintln(os.Stderr, "application:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// appOp is one write+fsync of the application.
type appOp struct {
	start time.Time
	took  time.Duration
}

// application is the body of the application process.
func application(dir string) error {
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("app.%d", os.Getpid())), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, appBytes)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	origin := time.Now()
	var ops []appOp
	for next := origin; ; next = next.Add(appPeriod) {
		select {
		case <-stop:
			for _, op := range ops {
				fmt.Println(op.start.Sub(origin).Nanoseconds(), op.took.Nanoseconds())
			}
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(len(ops)%appSlots)*appBytes); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		ops = append(ops, appOp{start, time.Since(start)})
	}
}

// app is a running application process.
type app struct {
	cmd    *exec.Cmd
	in     io.WriteCloser // closed to stop it
	out    strings.Builder
	origin time.Time
}

// startApp starts the application writing into dir.
func startApp(dir string) (*app, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	a := &app{cmd: exec.Command(exe)}
	a.cmd.Env = append(os.Environ(), appEnv+"="+dir)
	a.cmd.Stdout, a.cmd.Stderr = &a.out, os.Stderr
	if a.in, err = a.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := a.cmd.Start(); err != nil {
		return nil, err
	}
	a.origin = time.Now()
	return a, nil
}

// stop ends the application and returns its operations.
func (a *app) stop() ([]appOp, error) {
	if err := a.in.Close(); err != nil {
		return nil, err
	}
	if err := a.cmd.Wait(); err != nil {
		return nil, fmt.Errorf("application: %w", err)
	}
	var ops []appOp
	sc := bufio.NewScanner(strings.NewReader(a.out.String()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			return nil, fmt.Errorf("application printed %q", sc.Text())
		}
		s, err1 := strconv.ParseInt(f[0], 10, 64)
		d, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("application printed %q", sc.Text())
		}
		ops = append(ops, appOp{a.origin.Add(time.Duration(s)), time.Duration(d)})
	}
	return ops, nil
}

// percentile returns the p-th percentile (0 < p <= 1) of the latencies of
// ops: the smallest latency at least a fraction p of them do not exceed.
func percentile(ops []appOp, p float64) time.Duration {
	if len(ops) == 0 {
		return 0
	}
	d := make([]time.Duration, len(ops))
	for i, op := range ops {
		d[i] = op.took
	}
	slices.Sort(d)
	i := int(float64(len(d))*p+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// autoRun is one run of the section.
type autoRun struct {
	name  string
	flags []string // the daemon's
	bw    float64  // BW in the transfer file
	app   bool     // the application runs beside the whole flush
	step  bool     // the application starts a third into the flush and stops at two thirds
	flush time.Duration
	start time.Time // RUN
	stop  time.Time // the application stopped (step)
	ops   []appOp
	rates []sample // the daemon's write counter
}

// sharedDest is a FUSE destination of capacity bytes/s shared by the
// daemon and the application, its backing directory in memory so that
// only the bucket limits it. The server runs in a process of its own
// (fusemount): a child of the process serving FUSE inherits its
// /dev/fuse descriptor, and would hang for good on the mount once that
// process died.
type sharedDest struct {
	backing, mount string
	srv            *exec.Cmd
}

func (b *bench) mountShared(capacity float64) (*sharedDest, error) {
	if err := fusetest.Available(); err != nil {
		return nil, err
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	build := exec.Command("go", "build", "-o", b.bin, "./internal/fusetest/cmd/fusemount")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building fusemount: %w", err)
	}
	backing, err := os.MkdirTemp("/dev/shm", "scr-bench-auto-")
	if err != nil {
		return nil, err
	}
	d := &sharedDest{backing: backing, mount: filepath.Join(b.work, "shared")}
	if err := os.MkdirAll(d.mount, 0o755); err != nil {
		os.RemoveAll(backing)
		return nil, err
	}
	d.srv = exec.Command(filepath.Join(b.bin, "fusemount"), "-locks", "kernel", "-bw", strconv.FormatFloat(capacity, 'f', -1, 64), backing, d.mount)
	out, err := d.srv.StdoutPipe()
	if err == nil {
		d.srv.Stderr = os.Stderr
		err = d.srv.Start()
	}
	if err != nil {
		os.RemoveAll(backing)
		return nil, fmt.Errorf("fusemount: %w", err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		_ = d.srv.Process.Kill()
		_ = d.srv.Wait()
		os.RemoveAll(backing)
		return nil, fmt.Errorf("fusemount did not serve %s (it said %q)", d.mount, line)
	}
	return d, nil
}

func (d *sharedDest) close() error {
	err := d.srv.Process.Signal(syscall.SIGTERM)
	if err == nil {
		err = d.srv.Wait()
	}
	if rerr := os.RemoveAll(d.backing); err == nil {
		err = rerr
	}
	return err
}

// bwAuto runs the BW auto section: flushes of -auto-size to a FUSE
// destination of -auto-capacity bytes/s, alone and beside an application
// writing appBytes + fsync every appPeriod there, unthrottled, under a
// static BW of half the capacity and under BW auto, and prints the goals
// of issue 34 as ratios of the same run.
func (b *bench) bwAuto() error {
	capa, size := b.c.autoCapacity, b.c.autoSize
	dst, err := b.mountShared(capa)
	if err != nil {
		return err
	}
	defer dst.close()
	appDir := filepath.Join(dst.mount, "app")
	if err := os.MkdirAll(appDir, 0o755); err != nil {
		return err
	}
	src := filepath.Join(b.cache, "auto.bin")
	if err := makeFile(src, size); err != nil {
		return err
	}
	defer os.Remove(src)
	// At least appAloneOps operations, so that the p99 alone is not just
	// the slowest one: BW auto beside the application takes 20 s and more.
	alone, err := b.appAlone(appDir, max(appAloneOps*appPeriod, time.Duration(float64(size)/capa*float64(time.Second))))
	if err != nil {
		return err
	}
	auto := []string{"--bw", "auto"}
	runs := []*autoRun{
		{name: "unthrottled, no application"},
		{name: "BW auto, no application", flags: auto},
		{name: "unthrottled, beside the application", app: true},
		{name: fmt.Sprintf("static BW = %.0f MB/s, beside the application", capa/2e6), bw: capa / 2, app: true},
		{name: "BW auto, beside the application", flags: auto, app: true},
		{name: "BW auto, the application starts and stops mid-flush", flags: auto, step: true},
	}
	for _, r := range runs {
		if err := b.autoFlush(r, src, size, dst, appDir, runs[1].flush); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	b.stopDaemon()
	printAuto(capa, size, alone, runs)
	return nil
}

// appAlone runs the application alone on the destination for d.
func (b *bench) appAlone(dir string, d time.Duration) ([]appOp, error) {
	a, err := startApp(dir)
	if err != nil {
		return nil, err
	}
	time.Sleep(d) // the length of the measurement, not a wait for a condition
	return a.stop()
}

// autoFlush runs one flush of r, with the application beside it as r
// says; stepAt is the flush time of BW auto alone, which places the step.
func (b *bench) autoFlush(r *autoRun, src string, size int64, dst *sharedDest, appDir string, stepAt time.Duration) error {
	if err := b.startDaemonWith(r.flags...); err != nil {
		return err
	}
	if err := warm(src); err != nil {
		return err
	}
	dest := filepath.Join(dst.mount, "ckpt", "auto.bin")
	var a *app
	var err error
	if r.app {
		if a, err = startApp(appDir); err != nil {
			return err
		}
	}
	stepDone := make(chan error, 1)
	stop := make(chan struct{})
	samples := make(chan []sample, 1)
	go func() { samples <- b.sampleWrites(50*time.Millisecond, stop) }()
	if r.step {
		go func() { stepDone <- b.step(r, appDir, stepAt) }()
	}
	r.start = time.Now()
	r.flush, err = b.flush(src, dest, size, r.bw, 0)
	close(stop)
	r.rates = <-samples
	if r.step {
		if serr := <-stepDone; err == nil {
			err = serr
		}
	}
	if a != nil {
		ops, aerr := a.stop()
		if err == nil {
			err = aerr
		}
		r.ops = ops
	}
	if err != nil {
		return err
	}
	if err := sameBytes(src, filepath.Join(dst.backing, "ckpt", "auto.bin")); err != nil {
		return err
	}
	return os.Remove(dest)
}

// step starts the application a third of at into the flush and stops it
// at two thirds.
func (b *bench) step(r *autoRun, appDir string, at time.Duration) error {
	time.Sleep(at / 3) // when the step begins, by design
	a, err := startApp(appDir)
	if err != nil {
		return err
	}
	time.Sleep(at / 3) // how long the step lasts, by design
	r.ops, err = a.stop()
	r.stop = time.Now()
	return err
}

// sameBytes fails unless the files at a and b hold the same bytes.
func sameBytes(a, b string) error {
	out, err := exec.Command("cmp", a, b).CombinedOutput()
	if err != nil {
		return fmt.Errorf("the copy %s differs from its source %s: %v: %s", b, a, err, out)
	}
	return nil
}

// within returns the operations of ops that began after start and ended
// within d of it.
func within(ops []appOp, start time.Time, d time.Duration) []appOp {
	var in []appOp
	for _, op := range ops {
		if !op.start.Before(start) && !op.start.Add(op.took).After(start.Add(d)) {
			in = append(in, op)
		}
	}
	return in
}

// settled returns how long after the first operation of ops the last one
// slower than limit ended: 0 when none was.
func settled(ops []appOp, limit time.Duration) time.Duration {
	var d time.Duration
	for _, op := range ops {
		if op.took > limit {
			d = op.start.Add(op.took).Sub(ops[0].start)
		}
	}
	return d
}

// recovered returns how long after from the daemon's write rate, over a
// window of w, first reached rate; false if it never did.
func recovered(s []sample, from time.Time, w time.Duration, rate float64) (time.Duration, bool) {
	for i := range s {
		if s[i].at.Before(from) {
			continue
		}
		for j := i + 1; j < len(s); j++ {
			if el := s[j].at.Sub(s[i].at); el >= w {
				if float64(s[j].bytes-s[i].bytes)/el.Seconds() >= rate {
					return s[j].at.Sub(from), true
				}
				break
			}
		}
	}
	return 0, false
}

// printAuto prints the section's table and its goals.
func printAuto(capa float64, size int64, alone []appOp, runs []*autoRun) {
	appRate := float64(appBytes) / appPeriod.Seconds()
	ref := percentile(alone, 0.99)
	fmt.Printf("## BW auto: a %d MiB flush to a destination of %.0f MB/s shared with an application (%d MiB + fsync every %v)\n\n",
		size>>20, capa/1e6, appBytes>>20, appPeriod)
	fmt.Println("| run | flush | MB/s | app ops | app p50 | app p99 | app p50 / alone | app p99 / alone |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Printf("| application alone | | | %d | %.1f ms | %.1f ms | 1.00 | 1.00 |\n", len(alone), ms(percentile(alone, 0.5)), ms(ref))
	for _, r := range runs {
		ops := r.ops
		if r.app {
			ops = within(r.ops, r.start, r.flush)
		}
		app := " | | | | |"
		if len(ops) > 0 {
			app = fmt.Sprintf("%d | %.1f ms | %.1f ms | %.2f | %.2f |", len(ops), ms(percentile(ops, 0.5)), ms(percentile(ops, 0.99)),
				float64(percentile(ops, 0.5))/float64(percentile(alone, 0.5)), float64(percentile(ops, 0.99))/float64(ref))
		}
		fmt.Printf("| %s | %.2f s | %.1f | %s\n", r.name, r.flush.Seconds(), mbps(size, r.flush), app)
	}
	unthrottled, autoAlone, autoApp, step := runs[0], runs[1], runs[4], runs[5]
	free := time.Duration(float64(size) / (capa - appRate) * float64(time.Second))
	goal := func(name string, v, limit float64, unit string) {
		met := "yes"
		if v > limit {
			met = "NO"
		}
		fmt.Printf("| %s | %.2f%s | ≤ %g%s | %s |\n", name, v, unit, limit, unit, met)
	}
	fmt.Println("\n| goal | measured | goal | met |\n|---|---:|---:|---|")
	goal("app p99 beside BW auto / app p99 alone", float64(percentile(within(autoApp.ops, autoApp.start, autoApp.flush), 0.99))/float64(ref), 1.2, "")
	goal(fmt.Sprintf("BW auto beside the app / size ÷ (C − app rate) = %.2f s", free.Seconds()), autoApp.flush.Seconds()/free.Seconds(), 1.3, "")
	// What this machine allows: the unthrottled flush's own rate, not C,
	// less the application's.
	if left := float64(size)/unthrottled.flush.Seconds() - appRate; left > 0 {
		goal(fmt.Sprintf("  (same, C measured: size ÷ (unthrottled rate − app rate) = %.2f s)", float64(size)/left), autoApp.flush.Seconds()*left/float64(size), 1.3, "")
	}
	goal("BW auto, no app / unthrottled, no app", autoAlone.flush.Seconds()/unthrottled.flush.Seconds(), 1.1, "")
	if len(step.ops) > 0 {
		goal("step: app started → its ops within 1.2 × alone after", settled(step.ops, ref*6/5).Seconds(), 2, " s")
	}
	if d, ok := recovered(step.rates, step.stop, 500*time.Millisecond, 0.9*float64(size)/autoAlone.flush.Seconds()); ok {
		goal("step: app stopped → flush at 90 % of its rate alone after", d.Seconds(), 2, " s")
	} else {
		fmt.Println("| step: app stopped → flush at 90 % of its rate alone | never, before the flush ended | ≤ 2 s | NO |")
	}
	fmt.Println()
}
