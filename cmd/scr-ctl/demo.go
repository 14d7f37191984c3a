package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpDemo = `
Shows the whole product in a few seconds, with nothing installed but Go:
  1. writes sample checkpoints of every kind the daemon understands into a
     temporary cache: a SIONlib container with gaps between its chunks, an
     FTI-FF checkpoint, a SciDAC/LIME lattice file and a plain file;
  2. starts the daemon (its run loop, in this process) on a transfer file;
  3. plays the SCR library's part: lists the files with their destinations
     in a temporary "parallel file system", sets BW, and says RUN;
  4. shows the status view while the throttled flush runs;
  5. compares every destination with its source byte for byte, checks the
     CRC32 the daemon recorded, and verifies each destination's format;
  6. asks the daemon to EXIT, and prints where everything is.
The files are kept for a look afterwards unless --cleanup is given.`

// demoLayout is where the demo puts things.
type demoLayout struct {
	root, cache, pfs, transfer, log string
}

func cmdDemo(e *env, args []string) error {
	fs := newFlags("demo")
	dir := fs.String("dir", "", "work in this directory (default: a new temporary directory)")
	bwFlag := fs.String("bw", "4MiB", "bandwidth limit for the flush (BW), bytes per second with an optional K/M/G suffix")
	cleanup := fs.Bool("cleanup", false, "remove the demo's files at the end")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up if the flush has not completed after this long")
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
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "scr-demo-"); err != nil {
			return fmt.Errorf("temporary directory: %w", err)
		}
	}
	if root, err = filepath.Abs(root); err != nil {
		return err
	}
	l := demoLayout{
		root:     root,
		cache:    filepath.Join(root, "cache", "scr.demo", "dataset.1"),
		pfs:      filepath.Join(root, "pfs", "scr.dataset.1"),
		transfer: filepath.Join(root, "control", "transfer.scrinfo"),
		log:      filepath.Join(root, "scr-transferd.log"),
	}
	if *cleanup {
		defer os.RemoveAll(root)
	}
	return runDemo(e, l, bw, *timeout)
}

func runDemo(e *env, l demoLayout, bw float64, timeout time.Duration) error {
	out := e.stdout
	step := func(format string, args ...any) { fmt.Fprintf(out, "\n== "+format+"\n", args...) }

	step("1. sample checkpoints in the cache: %s", l.cache)
	for _, d := range []string{l.cache, l.pfs, filepath.Dir(l.transfer)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	type pair struct{ src, dest string }
	var files []pair
	var dataBytes int64
	for _, f := range demoFiles() {
		p := filepath.Join(l.cache, f.name)
		if err := f.make(p); err != nil {
			return fmt.Errorf("writing the sample %s: %w", p, err)
		}
		r := verifyFile(e.ctx, p)
		if !r.OK {
			return fmt.Errorf("the sample %s is not sound: %s", p, r.Error)
		}
		fmt.Fprintf(out, "   %-16s %-6s %9s apparent, %9s of data  %s\n", f.name, r.Kind,
			units.IEC(float64(r.Size)), units.IEC(float64(r.DataBytes)), r.Detail)
		files = append(files, pair{p, filepath.Join(l.pfs, f.name)})
		dataBytes += r.DataBytes
	}

	step("2. the daemon, on %s (log: %s)", l.transfer, l.log)
	logFile, err := os.Create(l.log)
	if err != nil {
		return err
	}
	defer logFile.Close()
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(ec), zapcore.AddSync(logFile), zap.InfoLevel))
	// The library creates the transfer file; an empty one is an empty hash.
	store := hashfile.NewStore(l.transfer, hashfile.Flock)
	if _, _, err := store.Update(func(*hashfile.Tree) error { return nil }); err != nil {
		return err
	}
	dctx, stopDaemon := context.WithCancel(e.ctx)
	defer stopDaemon()
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(dctx, daemon.Config{
			TransferFile: l.transfer,
			Poll:         100 * time.Millisecond,
			// Durable progress is recorded every 200 ms so that the view moves.
			Flush:    flush.Options{SyncInterval: 200 * time.Millisecond, SyncBytes: 1 << 20},
			Verify:   daemon.VerifyBoth,
			RetryMin: time.Second,
			Log:      log,
		})
	}()
	// If anything below fails, stop the daemon and wait for it.
	defer func() {
		stopDaemon()
		<-done
	}()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	err = watchView(ctx, store, defaultPoll, 30*time.Second, func(v transfer.View) (bool, error) {
		return v.State == transfer.Stopped, nil
	}, func(v transfer.View) string { return "the daemon did not record STATE STOPPED; see " + l.log })
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   the daemon is up: STATE STOPPED\n")

	step("3. the library's part: %d files, BW %s, COMMAND RUN", len(files), bwText(bw))
	started := time.Now()
	if _, _, err := store.Update(func(t *hashfile.Tree) error {
		for _, f := range files {
			fi, err := os.Stat(f.src)
			if err != nil {
				return err
			}
			transfer.AddFile(t, f.src, f.dest, fi.Size())
		}
		transfer.SetBW(t, bw)
		transfer.SetCommand(t, transfer.Run)
		return nil
	}); err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintf(out, "   %s\n     -> %s\n", f.src, f.dest)
	}

	step("4. the flush, as 'scr-ctl status --watch' shows it")
	isTerm, cols, rows := e.term()
	o := view{}
	if isTerm {
		o = view{width: cols, height: rows}
	}
	wctx, wcancel := context.WithTimeout(e.ctx, timeout)
	defer wcancel()
	var last statusReport
	interval := time.Second
	if isTerm {
		interval = 200 * time.Millisecond
	}
	werr := watchStatus(&env{ctx: wctx, stdout: out, stderr: e.stderr, now: e.now, term: e.term}, store, watchOpts{
		interval: interval, poll: defaultPoll, view: o, redraw: isTerm, onChange: isTerm,
		stop: func(r statusReport) bool {
			last = r
			return r.Complete || r.Totals.InError > 0
		},
	})
	switch {
	case werr != nil:
		return werr
	case last.Totals.InError > 0:
		return fmt.Errorf("a file is in error; the daemon's log is %s", l.log)
	case !last.Complete && e.ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", e.ctx.Err())
	case !last.Complete:
		return fmt.Errorf("the flush did not complete within %s; the daemon's log is %s", timeout, l.log)
	}
	elapsed := time.Since(started)
	fmt.Fprintf(out, "   %d files, %s of data (%s apparent) flushed in %s: %s/s under BW %s\n",
		len(files), units.IEC(float64(dataBytes)), units.IEC(float64(last.Totals.Size)),
		elapsed.Round(100*time.Millisecond), units.IEC(float64(dataBytes)/elapsed.Seconds()), bwText(bw))

	step("5. checking the destinations")
	crcs := map[string]string{}
	for _, f := range last.Files {
		crcs[f.Source] = f.CRC
	}
	bad := 0
	for _, f := range files {
		same, crc, err := compareFiles(f.src, f.dest)
		switch {
		case err != nil:
			fmt.Fprintf(out, "   FAIL  %s: %v\n", f.dest, err)
			bad++
			continue
		case !same:
			fmt.Fprintf(out, "   FAIL  %s differs from %s\n", f.dest, f.src)
			bad++
			continue
		case crcs[f.src] != hashfile.FormatCRC(crc):
			fmt.Fprintf(out, "   FAIL  %s: CRC32 %s, the daemon recorded %q\n", f.dest, hashfile.FormatCRC(crc), crcs[f.src])
			bad++
			continue
		}
		fmt.Fprintf(out, "   same bytes as the source, CRC32 %s as recorded in the transfer file\n", hashfile.FormatCRC(crc))
		r := verifyFile(e.ctx, f.dest)
		var b bytes.Buffer
		writeVerify(&b, r)
		for _, line := range bytes.SplitAfter(b.Bytes(), []byte("\n")) {
			if len(line) > 0 {
				fmt.Fprintf(out, "   %s", line)
			}
		}
		if !r.OK {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d destinations failed the checks", bad, len(files))
	}

	step("6. COMMAND EXIT")
	if _, _, err := store.Update(func(t *hashfile.Tree) error {
		transfer.SetCommand(t, transfer.Exit)
		return nil
	}); err != nil {
		return err
	}
	select {
	case err := <-done:
		done <- err // for the deferred wait
		if err != nil {
			return fmt.Errorf("the daemon: %w", err)
		}
	case <-time.After(30 * time.Second):
		return errors.New("the daemon did not exit within 30s of COMMAND EXIT")
	case <-e.ctx.Done():
		return fmt.Errorf("interrupted: %w", e.ctx.Err())
	}
	t, err := store.Read()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   the daemon exited; STATE %s\n", transfer.Read(t).State)

	fmt.Fprintf(out, "\nEverything is in %s:\n", l.root)
	fmt.Fprintf(out, "  cache (sources)         %s\n", l.cache)
	fmt.Fprintf(out, "  PFS (destinations)      %s\n", l.pfs)
	fmt.Fprintf(out, "  transfer file           %s\n", l.transfer)
	fmt.Fprintf(out, "  daemon log              %s\n", l.log)
	fmt.Fprintf(out, "Try:\n")
	fmt.Fprintf(out, "  go run ./cmd/scr-ctl print %s\n", l.transfer)
	fmt.Fprintf(out, "  go run ./cmd/scr-ctl status %s\n", l.transfer)
	fmt.Fprintf(out, "  go run ./cmd/scr-ctl verify %s\n", filepath.Join(l.pfs, "*"))
	fmt.Fprintf(out, "  rm -rf %s\n", l.root)
	return nil
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
