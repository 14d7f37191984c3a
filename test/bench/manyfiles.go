package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/transfer"
	"golang.org/x/sys/unix"
)

// manyFiles measures flushes of many files against `cp -r` of the same
// directory followed by `sync` (the daemon's copies are durable when it
// records them): files/s and MB/s for 2000 × 64 KiB and 200 × 4 MiB, and
// for 1k, 10k and 100k entries of 1 KiB the time to DONE, the time of one
// locked update of a transfer file that size, and the daemon's peak RSS.
func (b *bench) manyFiles() error {
	fmt.Printf("## Many files: scr-transferd (default settings) vs cp -r + sync (median of %d; sources in page cache)\n\n", b.c.runs)
	fmt.Println("| files | cp -r + sync files/s | MB/s | scr-transferd files/s | MB/s | vs cp | durable floor files/s | floor vs cp |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	var costs []string // the daemon's cost per run of each size
	for _, s := range []struct {
		n     int
		size  int64
		floor bool
	}{{2000, 64 << 10, true}, {200, 4 << 20, false}} {
		m, err := b.manyRound(s.n, s.size, b.c.runs, s.floor)
		if err != nil {
			return err
		}
		costs = append(costs, fmt.Sprintf("%d × %s: %d minor page faults, %.0f ms of CPU (the library's update before it: %.1f ms)",
			s.n, sizeText(s.size), m.faults, ms(m.cpu), ms(m.update)))
		total := int64(s.n) * s.size
		fl := "– | –" // not measured, or no unnamed files on this file system
		if m.floor > 0 {
			fl = fmt.Sprintf("%.0f | %.2f×", float64(s.n)/m.floor.Seconds(), m.cp.Seconds()/m.floor.Seconds())
		}
		fmt.Printf("| %d × %s | %.0f | %.0f | %.0f | %.0f | %.2f× | %s |\n", s.n, sizeText(s.size),
			float64(s.n)/m.cp.Seconds(), mbps(total, m.cp), float64(s.n)/m.daemon.Seconds(), mbps(total, m.daemon), m.cp.Seconds()/m.daemon.Seconds(), fl)
		b.record(figure{goal: fmt.Sprintf("%d × %s: files/s vs cp -r + sync", s.n, sizeText(s.size)), unit: "×", value: m.cp.Seconds() / m.daemon.Seconds(), sense: higher})
		b.record(figure{goal: fmt.Sprintf("%d × %s: files/s (the daemon's own)", s.n, sizeText(s.size)), unit: "files/s", value: float64(s.n) / m.daemon.Seconds(), sense: higher})
	}
	fmt.Println()
	fmt.Println("The durable floor is the least a copy of small files making the daemon's promise does: one thread, each file into an unnamed file, one syncfs for the data, a link per file, one syncfs for the names; no check, CRC or transfer file.")
	fmt.Println()
	fmt.Printf("scr-transferd per run, RUN to DONE (medians): %s. The daemon's time runs from the end of the library's update (the files and COMMAND RUN written, the lock released) to when a reader taking the lock could see DONE. ", strings.Join(costs, "; "))
	fmt.Printf("A new daemon touches most of its memory for the first time during its first flush; on this machine a first touch of a page costs %s (transparent huge pages: %s).\n\n",
		faultCostText(), thpMode())
	fmt.Println("| entries of 1 KiB | transfer file | cp -r + sync | scr-transferd RUN to DONE | vs cp | one locked update | daemon peak RSS |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	var updates []string // the library's update before each count's flush
	for _, n := range b.c.entries {
		// Every count gets its median, 100k too: on a virtual disk one
		// run of cp -r + sync of 100k files took from 5 to 20 s.
		m, err := b.manyRound(n, 1<<10, b.c.runs, false)
		if err != nil {
			return err
		}
		hwm, err := b.peakRSS()
		if err != nil {
			return err
		}
		upd, size, err := b.updateCost()
		if err != nil {
			return err
		}
		fmt.Printf("| %d | %.1f MB | %.2f s | %.2f s | %.2f× | %.1f ms | %.0f MB |\n", n, float64(size)/1e6,
			m.cp.Seconds(), m.daemon.Seconds(), m.cp.Seconds()/m.daemon.Seconds(), ms(upd), float64(hwm)/1e6)
		b.record(figure{goal: fmt.Sprintf("%d entries of 1 KiB: speed vs cp -r + sync", n), unit: "×", value: m.cp.Seconds() / m.daemon.Seconds(), sense: higher})
		b.record(figure{goal: fmt.Sprintf("%d entries of 1 KiB: RUN to DONE (the daemon's own)", n), unit: "s", value: m.daemon.Seconds(), sense: lower})
		b.record(figure{goal: fmt.Sprintf("%d entries of 1 KiB: daemon peak RSS", n), unit: "MB", value: float64(hwm) / 1e6, sense: lower})
		updates = append(updates, fmt.Sprintf("%d entries: %.1f ms", n, ms(m.update)))
	}
	fmt.Println()
	if len(updates) > 0 {
		fmt.Printf("The library's update that started each flush (medians), before RUN to DONE: %s.\n\n", strings.Join(updates, "; "))
	}
	return nil
}

// pattern returns size bytes that differ from file to file.
func pattern(i int, size int64) []byte {
	b := make([]byte, size)
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for k := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[k] = byte(x)
	}
	return b
}

// checkCopies reports an error, naming the file, unless every source of
// paths (pattern i of size bytes) is in dst under its own name with its
// bytes. It runs after a timed flush, outside its time: a fast flush of
// the wrong bytes is no result.
func checkCopies(paths []string, dst string, size int64) error {
	for i, p := range paths {
		name := filepath.Join(dst, filepath.Base(p))
		got, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		switch {
		case int64(len(got)) != size:
			return fmt.Errorf("%s: %d bytes, its source %d", name, len(got), size)
		case !bytes.Equal(got, pattern(i, size)):
			return fmt.Errorf("%s: not its source's bytes", name)
		}
	}
	return nil
}

func sizeText(n int64) string {
	if n >= 1<<20 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n>>10, 10) + " KiB"
}

// manyResult is what manyRound measured: medians over its runs.
type manyResult struct {
	cp, daemon time.Duration // cp -r + sync; the daemon's flush, RUN to DONE
	floor      time.Duration // durableFloor's copy, 0 if not measured
	// update is the library's update that starts the flush: the files
	// and COMMAND RUN written, in one locked update, before the daemon's
	// time starts.
	update time.Duration
	// The daemon's minor page faults and CPU time (user + system) from
	// RUN to DONE.
	faults int64
	cpu    time.Duration
}

// manyRound creates n files of size bytes and returns the median time of
// cp -r + sync and of a fresh daemon's flush of them (RUN to DONE), with
// the daemon's page faults and CPU time over that flush, and with floor
// the median time of durableFloor's copy of them. The daemon is left
// running, its transfer file listing the n files.
func (b *bench) manyRound(n int, size int64, runs int, floor bool) (manyResult, error) {
	var none manyResult
	src := filepath.Join(b.cache, fmt.Sprintf("many-%d-%d", n, size))
	if err := os.MkdirAll(src, 0o755); err != nil {
		return none, err
	}
	defer os.RemoveAll(src)
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(src, fmt.Sprintf("rank%06d.ckpt", i))
		if err := os.WriteFile(paths[i], pattern(i, size), 0o644); err != nil {
			return none, err
		}
	}
	if _, err := timeCmd("sync"); err != nil {
		return none, err
	}
	warmAll := func() error {
		for _, p := range paths {
			if err := warm(p); err != nil {
				return err
			}
		}
		return nil
	}
	// Each run copies to directories of its own, and they are removed only
	// once the round is over. On an ext4 without a journal (this benchmark's
	// usual machine) a file created within a minute or so of a mass
	// deletion costs far more: the inode allocator steps over the recently
	// deleted inodes one by one. Removing one tool's copy right before the
	// other's run timed that deletion, not the tool.
	var dirs []string
	defer func() {
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}()
	var cps, ds, fs, cpus, updates []time.Duration
	var faults []int64
	// The tools take turns at going first: run r starts with tool r mod
	// the number of tools. Whoever runs after another writes into a file
	// system and a page cache the one before it has just used (inodes
	// allocated, pages freed, write-back finishing), and a fixed order
	// gave that cost, or that benefit, to the same tool in every run.
	runCp := func(r int) error {
		dst := filepath.Join(b.pfs, fmt.Sprintf("cp-many-%d", r))
		dirs = append(dirs, dst)
		if err := warmAll(); err != nil {
			return err
		}
		t1, err := timeCmd("cp", "-r", src, dst)
		if err != nil {
			return err
		}
		t2, err := timeCmd("sync")
		if err != nil {
			return err
		}
		cps = append(cps, t1+t2)
		return evict(dst)
	}
	runFloor := func(r int) error {
		if !floor {
			return nil
		}
		if err := warmAll(); err != nil {
			return err
		}
		dst := filepath.Join(b.pfs, fmt.Sprintf("floor-many-%d", r))
		dirs = append(dirs, dst)
		t, err := durableFloor(paths, dst)
		switch {
		case errors.Is(err, errNoFloor):
			floor = false
			return nil
		case err != nil:
			return fmt.Errorf("durable floor: %w", err)
		}
		fs = append(fs, t)
		if err := checkCopies(paths, dst, size); err != nil {
			return fmt.Errorf("durable floor: %w", err)
		}
		return evict(dst)
	}
	runDaemon := func(r int) error {
		if err := warmAll(); err != nil {
			return err
		}
		dst := filepath.Join(b.pfs, fmt.Sprintf("daemon-many-%d", r))
		dirs = append(dirs, dst)
		if err := b.startDaemon(); err != nil {
			return err
		}
		faults0, cpu0, err := b.daemonCost()
		if err != nil {
			return err
		}
		// As the SCR library starts a flush (SCR 1.2.2, see the protocol's
		// section 5): the files and COMMAND RUN in one locked update. The
		// daemon's time starts when it returns: until then the library
		// holds the lock and the request is not in the file, and building
		// and writing it is the library's work, as the list of files is
		// cp's caller's. Its time is reported beside (4 to 9 ms at 2000
		// entries, its fsync included).
		asked := time.Now()
		_, _, err = b.store.Update(func(t *hashfile.Tree) error {
			for _, p := range paths {
				transfer.AddFile(t, p, filepath.Join(dst, filepath.Base(p)), size)
			}
			transfer.SetCommand(t, transfer.Run)
			return nil
		})
		if err != nil {
			return err
		}
		start := time.Now()
		updates = append(updates, start.Sub(asked))
		// Poll gently: the raw bytes, without the lock the daemon needs,
		// until FLAG DONE shows in them; then a locked read decides.
		seen, err := b.waitForDone(time.Millisecond, 2*time.Hour)
		if err != nil {
			return err
		}
		ds = append(ds, seen.Sub(start))
		faults1, cpu1, err := b.daemonCost()
		if err != nil {
			return err
		}
		faults, cpus = append(faults, faults1-faults0), append(cpus, cpu1-cpu0)
		if err := checkCopies(paths, dst, size); err != nil {
			return fmt.Errorf("scr-transferd reported DONE: %w", err)
		}
		return evict(dst)
	}
	tools := []func(int) error{runCp, runFloor, runDaemon}
	for r := range runs {
		for k := range tools {
			if err := tools[(r+k)%len(tools)](r); err != nil {
				return none, err
			}
		}
		// Each run on standard error: the spread behind the median.
		var fl string
		if floor && r < len(fs) {
			fl = fmt.Sprintf(", durable floor %.3f s", fs[r].Seconds())
		}
		fmt.Fprintf(os.Stderr, "bench: %d × %s, run %d: cp -r + sync %.3f s, scr-transferd %.3f s%s\n",
			n, sizeText(size), r+1, cps[r].Seconds(), ds[r].Seconds(), fl)
	}
	m := manyResult{cp: median(cps), daemon: median(ds), update: median(updates), faults: median(faults), cpu: median(cpus)}
	if len(fs) > 0 {
		m.floor = median(fs)
	}
	return m, nil
}

// waitForDone waits until the daemon has set FLAG DONE with no file
// pending, and returns when a reader that takes the transfer file's lock,
// as the SCR library does, could first see it. It reads the file when it
// changed (inotify, through the daemon's own watcher), without its lock,
// and only once "DONE" shows in the bytes takes the lock and reads the
// file again. A flush of 100k entries rewrites a 21 MB file, and a reader
// that decoded it, or read it every few milliseconds whether it changed
// or not, would take CPU time from the daemon it measures (on two CPUs, a
// read of the 2000-entry file every 5 ms took about a tenth of the
// daemon's CPU time; cp has no such neighbour). Reads are at least every
// apart, and ten times as long as a read took on the CPU, so the reader
// never takes more than a tenth of a CPU; as they follow the daemon's
// rewrites (a few per flush), every can be short, and the time to see
// DONE with it.
//
// The time returned is when the lock was granted, not when the decode
// after it ended: the decode of a 2000-entry file takes the reader 3 to
// 5 ms, which are the reader's, not the flush's (cp's time ends when sync
// returns). Nor is it when DONE first showed in the bytes: the daemon
// writes the new image, then fsyncs it before it lets the lock go, and a
// reader that ignores the lock sees DONE before it is durable.
//
// The bound counts the reader's own CPU time (its thread's clock), not
// the wall time of a read: on a machine the flush keeps busy, a read of a
// quarter of a millisecond of CPU can take several milliseconds of wall
// time while the reader waits for a CPU, and a bound of ten times that
// held the reader back for up to 60 ms after the daemon had written DONE.
func (b *bench) waitForDone(every, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	changed := filewatch.Watch(ctx, b.transfer, every, nil)
	done, failed := []byte("DONE\x00"), []byte("ERROR\x00")
	runtime.LockOSThread() // so that the thread's clock is the reader's
	defer runtime.UnlockOSThread()
	var raw, img []byte
	for {
		start, cpu := time.Now(), threadCPU()
		var err error
		raw, err = readReusing(b.transfer, raw)
		pause := max(every, 10*(threadCPU()-cpu))
		if err == nil && (bytes.Contains(raw, done) || bytes.Contains(raw, failed)) {
			var at time.Time
			if at, img, err = readLocked(b.transfer, img); err != nil {
				return at, err
			}
			if t, err := hashfile.Decode(img); err == nil {
				v := transfer.Read(t)
				if v.Done && !v.HasPending() {
					return at, nil
				}
				// A failed copy is retried after a back-off of a second
				// or more: a time that includes one measures the
				// failure, not the copy. Stop and say why.
				for _, f := range v.Files {
					if f.Error != "" {
						return at, fmt.Errorf("the daemon failed to copy %s: %s", f.Src, f.Error)
					}
				}
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Now(), errors.New("timed out waiting for the daemon")
		}
		time.Sleep(time.Until(start.Add(pause))) // the rate bound above
	}
}

// readLocked reads the file at path into buf's array (see readReusing)
// under a shared flock(2), the lock the daemon takes with its default
// --locking, and returns when the lock was granted.
func readLocked(path string, buf []byte) (time.Time, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, buf[:0], err
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return time.Time{}, buf[:0], fmt.Errorf("locking %s: %w", path, err)
	}
	at := time.Now()
	b := bytes.NewBuffer(buf[:0])
	_, err = b.ReadFrom(f)
	return at, b.Bytes(), err // the lock goes with the descriptor
}

// readReusing reads the file at path into buf's array when it is large
// enough: a fresh buffer for each read of a large file costs the reader
// a page fault for each of its pages.
func readReusing(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf[:0], err
	}
	defer f.Close()
	b := bytes.NewBuffer(buf[:0])
	_, err = b.ReadFrom(f)
	return b.Bytes(), err
}

// threadCPU returns the CPU time the calling thread has used; its caller
// locks itself to its thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// peakRSS returns the running daemon's peak resident set (VmHWM).
func (b *bench) peakRSS() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.daemon.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc/PID/status")
}

// updateCost stops the daemon and returns the median time of one locked
// update that rewrites the transfer file it left (one WRITTEN changed, as
// a commit does), and the file's size.
func (b *bench) updateCost() (time.Duration, int64, error) {
	b.stopDaemon()
	var d []time.Duration
	for i := range 5 {
		start := time.Now()
		_, _, err := b.store.Update(func(t *hashfile.Tree) error {
			for _, f := range transfer.Read(t).Files {
				transfer.SetWritten(t, f, int64(i%2))
				break
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		d = append(d, time.Since(start))
	}
	fi, err := os.Stat(b.transfer)
	if err != nil {
		return 0, 0, err
	}
	return median(d), fi.Size(), nil
}

// evict drops the page cache of the copies in dir, durable by then, so
// that each tool writes into pages the tool before it freed. Without it
// the tool that runs last in a run writes into memory no one has used
// yet, and on the development machine (a virtual machine) that cost the
// daemon, then always last, twice its CPU time from the second run on:
// the kernel's copy into the page cache ran 27 times slower (see
// "Afternoon (24 November)" in docs/PERFORMANCE.md).
func evict(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
		if err != nil {
			return fmt.Errorf("dropping the cached pages of %s: %w", f.Name(), err)
		}
	}
	return nil
}

// daemonCost returns the running daemon's minor page faults and CPU time
// (user + system) so far.
func (b *bench) daemonCost() (int64, time.Duration, error) {
	pf, err := b.proc.PageFaults()
	if err != nil {
		return 0, 0, err
	}
	cpu, err := b.cpuTime()
	if err != nil {
		return 0, 0, err
	}
	return int64(pf.MinorFaults), cpu, nil
}

// faultCostText measures what a first touch of fresh anonymous memory
// costs a process on this machine: 64 MiB mapped and written to once per
// 4 KiB. It is the cost of a page fault (several hundred nanoseconds on
// bare metal, ten times more or worse in some virtual machines), or less
// where the kernel backs the mapping with huge pages.
func faultCostText() string {
	const size = 64 << 20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer unix.Munmap(mem)
	start := time.Now()
	for i := 0; i < size; i += 4 << 10 {
		mem[i] = 1
	}
	return fmt.Sprintf("%.1f µs per 4 KiB", float64(time.Since(start).Nanoseconds())/1e3/(size/(4<<10)))
}

// thpMode returns the kernel's transparent huge page mode for anonymous
// memory ("always", "madvise" or "never").
func thpMode() string {
	raw, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "unknown"
	}
	for _, w := range strings.Fields(string(raw)) {
		if strings.HasPrefix(w, "[") && strings.HasSuffix(w, "]") {
			return strings.Trim(w, "[]")
		}
	}
	return "unknown"
}
