package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/cache/cachetest"
	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/beneath"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpDemo = `
Shows the whole product in a few seconds, with nothing installed but Go:
  1. writes sample checkpoints of every kind the daemon understands into a
     cache: a SIONlib container with gaps between its chunks, an FTI-FF
     checkpoint, a SciDAC/LIME lattice file and a plain file;
  2. starts the daemon (its run loop, in this process) on a transfer file;
  3. plays the SCR library's part: lists the files with their destinations
     in a "parallel file system", sets BW, and says RUN;
  4. shows the throttled flush, counting the bytes that hold data (the
     gaps of the SIONlib container stay holes and are not transferred), so
     the rate shown compares with BW;
  5. compares every destination with its source byte for byte, checks the
     CRC32 the daemon recorded, and verifies each destination's format;
  6. asks the daemon to EXIT, and prints a summary.
Everything goes into a new directory scr-demo-XXXXXX that the demo creates
under --dir (default: the temporary directory); nothing else there is
touched. --cleanup removes that directory, and only it, at the end (a
failed demo keeps it for a look). The screen fits 80 columns; --width sets
the width when stdout is not a terminal.`

// demoLayout is where the demo puts things; root is the directory it
// created, and every other path lies beneath it.
type demoLayout struct {
	root, cache, pfs, transfer, log string
}

func newDemoLayout(root string) demoLayout {
	return demoLayout{
		root:     root,
		cache:    filepath.Join(root, "cache", "scr.demo", "dataset.1"),
		pfs:      filepath.Join(root, "pfs", "scr.dataset.1"),
		transfer: filepath.Join(root, "control", "transfer.scrinfo"),
		log:      filepath.Join(root, "scr-transferd.log"),
	}
}

// rel names a path of the layout relative to its root, for the screen.
func (l demoLayout) rel(p string) string {
	if r, ok := beneath.Rel(l.root, p); ok {
		return r
	}
	return p
}

// demoOptions are the demo's settings.
type demoOptions struct {
	bw      float64
	timeout time.Duration
	width   int    // columns of the screen
	live    bool   // redraw the progress in place (a terminal)
	ctl     string // how the "Try:" lines invoke scr-ctl
}

// demoMakeDir creates the demo's own directory under parent (created too
// when missing). It returns the directory and a function that removes it,
// and parent if the demo created it and it is empty by then: nothing the
// demo did not create is ever removed.
func demoMakeDir(parent string) (string, func() error, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	parent, err := filepath.Abs(parent)
	if err != nil {
		return "", nil, err
	}
	var made []string // directories created, deepest last
	for d := parent; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		made = append([]string{d}, made...)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", nil, fmt.Errorf("--dir: %w", err)
	}
	root, err := os.MkdirTemp(parent, "scr-demo-")
	if err != nil {
		return "", nil, fmt.Errorf("--dir: %w", err)
	}
	remove := func() error {
		if err := os.RemoveAll(root); err != nil {
			return err
		}
		for i := len(made) - 1; i >= 0; i-- {
			if os.Remove(made[i]) != nil { // not empty: someone else's now
				break
			}
		}
		return nil
	}
	return root, remove, nil
}

// demoCtlCommand returns how a person can run scr-ctl from any directory:
// "scr-ctl" when that is on PATH, else this executable's absolute path,
// else (under "go run", whose executable is temporary) "go -C MODULE run
// ./cmd/scr-ctl" for the module found above the working directory.
func demoCtlCommand(lookPath func(string) (string, error), executable func() (string, error), getwd func() (string, error)) string {
	if p, err := lookPath("scr-ctl"); err == nil && p != "" {
		return "scr-ctl"
	}
	if exe, err := executable(); err == nil && !strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return exe
	}
	if wd, err := getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
				if bytes.Contains(b, []byte("module github.com/scr-transferd/scr-transferd\n")) {
					return "go -C " + d + " run ./cmd/scr-ctl"
				}
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "scr-ctl"
}

func cmdDemo(e *env, args []string) error {
	fs := newFlags("demo")
	dir := fs.String("dir", "", "create the demo's directory (scr-demo-XXXXXX) under this one (default: the temporary directory)")
	bwFlag := fs.String("bw", "4MiB", "bandwidth limit for the flush (BW), bytes per second with an optional K/M/G suffix")
	cleanup := fs.Bool("cleanup", false, "remove the demo's directory (only it) at the end")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up if the flush has not completed after this long")
	width := fs.Int("width", 0, "columns of the screen when stdout is not a terminal (default 80)")
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 0, "no arguments"); err != nil {
		return err
	}
	bw, err := units.Parse(*bwFlag)
	if err != nil {
		return usageError{"--bw: " + err.Error()}
	}
	if *width < 0 || (*width > 0 && *width < 60) {
		return usageError{"--width: want at least 60 columns"}
	}
	o := demoOptions{bw: bw, timeout: *timeout, width: 80,
		ctl: demoCtlCommand(exec.LookPath, os.Executable, os.Getwd)}
	if isTerm, cols, _ := e.term(); isTerm {
		o.live = true
		if cols > 0 {
			o.width = cols
		}
	}
	if *width > 0 {
		o.width = *width
	}
	root, remove, err := demoMakeDir(*dir)
	if err != nil {
		return err
	}
	l := newDemoLayout(root)
	sum, err := runDemo(e, l, o)
	if err != nil {
		return fmt.Errorf("%w (the demo's files are kept in %s)", err, root)
	}
	out := e.stdout
	if *cleanup {
		if err := remove(); err != nil {
			return fmt.Errorf("--cleanup: %w", err)
		}
		fmt.Fprintf(out, "\n%s\nRemoved %s (--cleanup): the demo created it.\n", sum, root)
		return nil
	}
	fmt.Fprintf(out, "\n%s\nKept in %s:\n", sum, root)
	fmt.Fprintf(out, "  cache/, pfs/, control/transfer.scrinfo, scr-transferd.log\n")
	fmt.Fprintf(out, "Try:\n")
	fmt.Fprintf(out, "  %s status %s\n", o.ctl, l.transfer)
	fmt.Fprintf(out, "  %s verify %s\n", o.ctl, filepath.Join(l.pfs, "*"))
	fmt.Fprintf(out, "  rm -rf %s\n", root)
	return nil
}

// demoFile is one sample as the demo tracks it.
type demoFile struct {
	name, src, dest string
	rep             *cache.Report
}

// dataBelow returns the bytes holding data in [0,n).
func (f demoFile) dataBelow(n int64) int64 {
	var d int64
	for _, r := range f.rep.Ranges {
		d += max(0, min(r.Off+r.Len, n)-r.Off)
	}
	return d
}

// runDemo plays the demo in l and returns its summary line.
func runDemo(e *env, l demoLayout, o demoOptions) (string, error) {
	out := e.stdout
	fmt.Fprintf(out, "scr-ctl demo: SCR's asynchronous flush, played out in\n  %s\n", l.root)
	files, dataBytes, err := demoWriteSamples(e.ctx, out, l)
	if err != nil {
		return "", err
	}
	d, err := startDemoDaemon(e.ctx, l)
	if err != nil {
		return "", err
	}
	defer d.close()
	if err := watchView(e.ctx, d.store, defaultPoll, 30*time.Second, func(v transfer.View) (bool, error) {
		return v.State == transfer.Stopped, nil
	}, func(transfer.View) string { return "the daemon did not record STATE STOPPED; see " + l.log }); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "2. The daemon watches %s: STATE STOPPED\n", l.rel(l.transfer))

	started := time.Now()
	if err := demoRequest(d.store, files, o.bw); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "3. The library: %d FILES to %s, BW %s, COMMAND RUN\n", len(files), l.rel(l.pfs), bwText(o.bw))
	v, elapsed, err := demoFlush(e, l, o, d.store, files, started)
	if err != nil {
		return "", err
	}
	if err := demoChecks(e.ctx, out, files, v); err != nil {
		return "", err
	}
	state, err := d.exit(e.ctx)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "6. COMMAND EXIT: the daemon exited, STATE %s\n", state)
	return fmt.Sprintf("Done: %d files, %s of data in %.1f s: %s/s under BW %s.",
		len(files), units.IEC(float64(dataBytes)), elapsed.Seconds(),
		units.IEC(float64(dataBytes)/elapsed.Seconds()), bwText(o.bw)), nil
}

// demoWriteSamples creates the demo's directories, writes every sample
// checkpoint into the cache and lists them on out (step 1), and returns
// them with the bytes of data they hold.
func demoWriteSamples(ctx context.Context, out io.Writer, l demoLayout) ([]demoFile, int64, error) {
	fmt.Fprintf(out, "1. Sample checkpoints in the cache (%s):\n", l.rel(l.cache))
	for _, d := range []string{l.cache, l.pfs, filepath.Dir(l.transfer)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, 0, err
		}
	}
	var files []demoFile
	var dataBytes int64
	for _, s := range cachetest.Samples() {
		p := filepath.Join(l.cache, s.Name)
		if err := s.Write(p); err != nil {
			return nil, 0, fmt.Errorf("writing the sample %s: %w", p, err)
		}
		rep, err := cache.Inspect(ctx, p)
		if err != nil {
			return nil, 0, fmt.Errorf("the sample %s is not sound: %w", p, err)
		}
		files = append(files, demoFile{name: s.Name, src: p, dest: filepath.Join(l.pfs, s.Name), rep: rep})
		dataBytes += rep.DataBytes
		line := fmt.Sprintf("   %-16s %-6s %8s, %8s of data  %s", s.Name, rep.Kind,
			units.IEC(float64(rep.Size)), units.IEC(float64(rep.DataBytes)), s.About)
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	return files, dataBytes, nil
}

// demoDaemon is the daemon the demo runs in this process on its transfer
// file, logging to the demo's log file.
type demoDaemon struct {
	store   *hashfile.Store
	stop    context.CancelFunc
	done    chan error // Run's result, received once
	exited  bool       // done was received
	logFile *os.File
}

// startDemoDaemon creates the transfer file as the library does (an empty
// one is an empty hash) and starts the daemon on it, with the daemon's own
// logger as scr-transferd makes it (sizes and rates in IEC units).
func startDemoDaemon(ctx context.Context, l demoLayout) (*demoDaemon, error) {
	logFile, err := os.Create(l.log)
	if err != nil {
		return nil, err
	}
	log, err := logging.New("console", "info", logFile)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	store := hashfile.NewStore(l.transfer, hashfile.Flock)
	if _, _, err := store.Update(func(*hashfile.Tree) error { return nil }); err != nil {
		logFile.Close()
		return nil, err
	}
	dctx, stop := context.WithCancel(ctx)
	d := &demoDaemon{store: store, stop: stop, done: make(chan error, 1), logFile: logFile}
	go func() {
		d.done <- daemon.Run(dctx, daemon.Config{
			Settings: daemon.Settings{
				TransferFile: l.transfer,
				// Durable progress is recorded every 200 ms so that the view moves.
				Flush:    flush.Options{SyncInterval: 200 * time.Millisecond, SyncBytes: 1 << 20},
				Verify:   daemon.VerifyBoth,
				RetryMin: time.Second,
			},
			Wiring: daemon.Wiring{Log: log},
		})
	}()
	return d, nil
}

// close stops the daemon unless it exited, waits for it and closes its log.
func (d *demoDaemon) close() {
	d.stop()
	if !d.exited {
		<-d.done
	}
	d.logFile.Close()
}

// exit writes COMMAND EXIT, waits up to 30 s for the daemon to exit and
// returns the STATE it left in the transfer file (step 6).
func (d *demoDaemon) exit(ctx context.Context) (transfer.State, error) {
	if _, _, err := d.store.Update(func(t *hashfile.Tree) error {
		transfer.SetCommand(t, transfer.Exit)
		return nil
	}); err != nil {
		return "", err
	}
	select {
	case err := <-d.done:
		d.exited = true
		if err != nil {
			return "", fmt.Errorf("the daemon: %w", err)
		}
	case <-time.After(30 * time.Second):
		return "", errors.New("the daemon did not exit within 30s of COMMAND EXIT")
	case <-ctx.Done():
		return "", fmt.Errorf("interrupted: %w", ctx.Err())
	}
	t, err := d.store.Read()
	if err != nil {
		return "", err
	}
	return transfer.Read(t).State, nil
}

// demoRequest does what the library does to start a flush (step 3): it
// lists files with their destinations and sizes, sets BW and COMMAND RUN.
func demoRequest(store *hashfile.Store, files []demoFile, bw float64) error {
	_, _, err := store.Update(func(t *hashfile.Tree) error {
		for _, f := range files {
			transfer.AddFile(t, f.src, f.dest, f.rep.Size)
		}
		transfer.SetBW(t, bw)
		transfer.SetCommand(t, transfer.Run)
		return nil
	})
	return err
}

// demoFlush shows the flush's progress (step 4), redrawn in place on a
// terminal, until every file is done or one is in error, and returns the
// last view and the time since started.
func demoFlush(e *env, l demoLayout, o demoOptions, store *hashfile.Store, files []demoFile, started time.Time) (transfer.View, time.Duration, error) {
	out := e.stdout
	fmt.Fprintf(out, "4. The flush, counting bytes that hold data (holes are not transferred):\n")
	drawn := false
	draw := func(v transfer.View, now time.Time) {
		if o.live && drawn {
			fmt.Fprintf(out, "\x1b[%dA", len(files)+1)
		}
		fmt.Fprint(out, demoProgress(files, v, now.Sub(started), o))
		drawn = true
	}
	wctx, wcancel := context.WithTimeout(e.ctx, o.timeout)
	defer wcancel()
	var lastDraw time.Time
	v, err := demoWait(wctx, store, o.timeout, func(v transfer.View) bool {
		if now := time.Now(); o.live && now.Sub(lastDraw) >= 200*time.Millisecond {
			draw(v, now)
			lastDraw = now
		}
		return (v.Done && !v.HasPending()) || demoInError(v)
	})
	elapsed := time.Since(started)
	switch {
	case err != nil && e.ctx.Err() != nil:
		return v, 0, fmt.Errorf("interrupted: %w", e.ctx.Err())
	case err != nil:
		return v, 0, fmt.Errorf("the flush did not complete within %s; the daemon's log is %s", o.timeout, l.log)
	case demoInError(v):
		return v, 0, fmt.Errorf("a file is in error; the daemon's log is %s", l.log)
	}
	draw(v, started.Add(elapsed))
	return v, elapsed, nil
}

// demoChecks checks each destination against its source, the CRC32
// recorded in v and its format, and lists the verdicts on out (step 5).
func demoChecks(ctx context.Context, out io.Writer, files []demoFile, v transfer.View) error {
	fmt.Fprintf(out, "5. Checks: same bytes as the source, the CRC32 recorded, the format:\n")
	crcs := map[string]string{}
	for _, f := range v.Files {
		crcs[f.Src] = hashfile.FormatCRC(f.CRC)
	}
	bad := 0
	for _, f := range files {
		verdict, ok := demoCheck(ctx, f, crcs[f.src])
		if !ok {
			bad++
		}
		fmt.Fprintf(out, "   %-16s %s\n", f.name, verdict)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d destinations failed the checks", bad, len(files))
	}
	return nil
}

// demoInError reports whether a file of v is in error.
func demoInError(v transfer.View) bool {
	for _, f := range v.Files {
		if f.Error != "" {
			return true
		}
	}
	return false
}

// demoWait reads the transfer file every 50 ms until cond holds, ctx ends
// or timeout passes, and returns the last view.
func demoWait(ctx context.Context, store *hashfile.Store, timeout time.Duration, cond func(transfer.View) bool) (transfer.View, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var v transfer.View
	for {
		if t, err := store.Read(); err == nil {
			v = transfer.Read(t)
			if cond(v) {
				return v, nil
			}
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-deadline.C:
			return v, context.DeadlineExceeded
		case <-tick.C:
		}
	}
}

// demoProgress renders one line per file and a total: a bar and the data
// bytes durable at the destination, and for the total the average rate of
// data since RUN, which a person can compare with BW.
func demoProgress(files []demoFile, v transfer.View, elapsed time.Duration, o demoOptions) string {
	var b strings.Builder
	written := map[string]int64{}
	for _, f := range v.Files {
		written[f.Src] = f.Written
	}
	// "   name(16) [bar] 100.0%  8.04 MiB / 8.04 MiB" takes 52 columns and
	// the bar, and the total adds " 1023.9 MiB/s"; one column is spare.
	barWidth := max(10, o.width-52-13-1)
	var doneAll, dataAll int64
	line := func(name string, done, data int64, tail string) {
		frac := 1.0
		if data > 0 {
			frac = float64(done) / float64(data)
		}
		full := int(frac * float64(barWidth))
		l := fmt.Sprintf("   %-16s [%s%s] %5.1f%%  %9s / %-9s%s", name,
			strings.Repeat("█", full), strings.Repeat("░", barWidth-full), 100*frac,
			units.IEC(float64(done)), units.IEC(float64(data)), tail)
		b.WriteString(strings.TrimRight(l, " "))
		b.WriteString("\x1b[K\n")
	}
	for _, f := range files {
		d := f.dataBelow(written[f.src])
		line(f.name, d, f.rep.DataBytes, "")
		doneAll += d
		dataAll += f.rep.DataBytes
	}
	rate := "-"
	if elapsed > 0 {
		rate = units.IEC(float64(doneAll)/elapsed.Seconds()) + "/s"
	}
	line("all", doneAll, dataAll, " "+rate)
	s := b.String()
	if !o.live {
		s = strings.ReplaceAll(s, "\x1b[K", "")
	}
	return s
}

// demoCheck compares a destination with its source and the CRC32 recorded,
// and verifies its format; it returns a one-line verdict.
func demoCheck(ctx context.Context, f demoFile, recorded string) (string, bool) {
	same, crc, err := compareFiles(f.src, f.dest)
	switch {
	case err != nil:
		return "FAIL " + err.Error(), false
	case !same:
		return "FAIL differs from its source", false
	case recorded != hashfile.FormatCRC(crc):
		return fmt.Sprintf("FAIL CRC32 %s, the daemon recorded %s", hashfile.FormatCRC(crc), recorded), false
	}
	r := verifyFile(ctx, f.dest)
	if !r.OK {
		return fmt.Sprintf("FAIL %s: %s", r.Kind, r.Error), false
	}
	return fmt.Sprintf("OK   same bytes, CRC32 %s, %s: %s of data", hashfile.FormatCRC(crc), r.Kind, units.IEC(float64(r.DataBytes))), true
}

// compareFiles reports whether a and b hold the same bytes, and the CRC32
// of b.
func compareFiles(a, b string) (same bool, crc uint32, err error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, 0, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, 0, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	same = true
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		crc = crc32.Update(crc, crc32.IEEETable, bb[:nb])
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			same = false
		}
		endA := errors.Is(erra, io.EOF) || errors.Is(erra, io.ErrUnexpectedEOF)
		endB := errors.Is(errb, io.EOF) || errors.Is(errb, io.ErrUnexpectedEOF)
		switch {
		case erra != nil && !endA:
			return false, 0, fmt.Errorf("%s: %w", a, erra)
		case errb != nil && !endB:
			return false, 0, fmt.Errorf("%s: %w", b, errb)
		case endA || endB:
			return same && endA == endB, crc, nil
		}
	}
}
