package test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Environment knobs of TestCrash.
const (
	crashTrialsEnv = "SCR_CRASH_TRIALS" // kills that must land mid-flush (default 100)
	crashSeedEnv   = "SCR_CRASH_SEED"   // seed of the random choices (default: from the clock)
)

// TestCrash kills the daemon with SIGKILL at random moments of multi-file
// flushes and restarts it. After every kill, no file may have WRITTEN beyond
// the bytes of its partial or final copy that equal the source, no file may
// sit under its final name unless it is complete, and the transfer file
// must still decode. Each flush is then run to DONE and every destination
// must equal its source, with the CRC32 recorded.
//
// A trial is a kill that lands while the flush still has bytes to copy;
// kills that land after the flush completed are counted apart. The random
// delay before each kill is the experiment itself; every other wait is on
// a condition.
func TestCrash(t *testing.T) {
	testenv.Long(t, "kills the daemon at many points of many flushes")
	trials := envInt(t, crashTrialsEnv, 100)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", crashSeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with %s=%d %s=%d)", seed, crashSeedEnv, seed, crashTrialsEnv, trials)
	rng := rand.New(rand.NewPCG(seed, seed^0x5c4_7a5f))

	n := newNode(t)
	var (
		kills, late    int
		progressed     int // kills after the daemon had recorded progress since its start
		noCRC          int // completed files left without a CRC
		bytesLost      int64
		bytesChecked   int64
		unthrottled    = 100e6 // bytes/s, re-estimated from every unthrottled flush
		start          = time.Now()
		maxGenerations = trials * 3
		d              *testenv.Process // the running daemon, nil after a kill
		flags          []string         // its flags
	)
	for gen := 0; kills < trials; gen++ {
		if gen == maxGenerations {
			t.Fatalf("only %d of %d kills landed mid-flush in %d flushes (%d late): the kill delays do not fit this machine", kills, trials, gen, late)
		}
		bw := 0.0
		if gen%2 == 0 {
			bw = []float64{8e6, 16e6, 32e6}[rng.IntN(3)]
		}
		// The first kill of a flush hits the daemon that completed the
		// previous one, from the moment the library issues RUN; later
		// kills hit a restarted daemon, from the moment it starts.
		srcs := crashFlush(t, n, rng, gen, bw)
		for k := 1 + rng.IntN(3); k > 0 && kills < trials; k-- {
			remaining := pendingBytes(n.view())
			if d == nil {
				flags = crashFlags(rng)
				d = n.start(flags...)
				d.WaitLog("started", settle)
			}
			rate := unthrottled
			if bw > 0 {
				rate = bw
			}
			window := 10*time.Millisecond + time.Duration(0.95*float64(remaining)/rate*float64(time.Second))
			delay := time.Duration(rng.Int64N(int64(window)))
			time.Sleep(delay)
			d.Signal(syscall.SIGKILL)
			d.Wait(settle)
			d = nil

			lost, checked, pending, problems := checkAfterKill(t, n, srcs)
			bytesLost += lost
			bytesChecked += checked
			if problems > 0 {
				t.Fatalf("stopping at kill %d (seed %d)", kills+late+1, seed)
			}
			if !pending {
				late++
				t.Logf("flush %d: kill after %v landed after the flush completed (window %v)", gen, delay, window)
				break
			}
			kills++
			left := pendingBytes(n.view())
			if left < remaining {
				progressed++
			}
			t.Logf("trial %d: flush %d BW %.0f, kill after %v of %v, flags %v: %d bytes left before, %d after, %d lost",
				kills, gen, bw, delay.Round(time.Microsecond), window.Round(time.Microsecond), flags, remaining, left, lost)
		}

		// Restart if needed and run to DONE.
		before := pendingBytes(n.view())
		var began time.Time
		if d == nil {
			flags = crashFlags(rng)
			d = n.start(flags...)
			d.WaitLog("started", settle)
			began = time.Now()
		}
		v := n.waitFor(fmt.Sprintf("DONE of flush %d", gen), 2*settle, done)
		if el := time.Since(began); !began.IsZero() && bw == 0 && before > 1<<20 {
			unthrottled = float64(before) / el.Seconds()
		}
		noCRC += checkCrashFlush(t, v, srcs)
		if t.Failed() && noCRC == 0 {
			t.Fatalf("flush %d is wrong after its restarts (seed %d)", gen, seed)
		}
		must(t, os.RemoveAll(filepath.Join(n.pfs, fmt.Sprintf("ckpt.%d", gen))))
		for src := range srcs {
			must(t, os.Remove(src))
		}
	}
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Exit) })
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d after EXIT", code)
	}
	t.Logf("kills mid-flush landing after progress since the daemon started: %d of %d", progressed, kills)
	t.Logf("%d trials (kills mid-flush), %d late kills, %d bytes of WRITTEN checked, %d bytes lost, %v",
		kills, late, bytesChecked, bytesLost, time.Since(start).Round(time.Millisecond))
	if bytesLost != 0 {
		t.Errorf("%d bytes recorded as WRITTEN were not in the copy (seed %d)", bytesLost, seed)
	}
	if noCRC != 0 {
		t.Errorf("%d files completed without their CRC recorded (see TestCrashBetweenCompletionAndCRC)", noCRC)
	}
}

// checkCrashFlush checks a flush run to DONE after its kills: every
// destination equals its source, WRITTEN = SIZE, no ERROR, no partial copy
// left. A missing CRC is counted (and reported) rather than ending the run,
// so that the durability figures cover every trial; a wrong CRC is an error.
func checkCrashFlush(t *testing.T, v transfer.View, srcs map[string][]byte) (noCRC int) {
	t.Helper()
	for src, data := range srcs {
		f, ok := file(v, src)
		if !ok {
			t.Errorf("%s: FILES entry missing", src)
			continue
		}
		if f.Written != int64(len(data)) || f.Error != "" {
			t.Errorf("%s: WRITTEN %d ERROR %q at DONE; want WRITTEN %d", src, f.Written, f.Error, len(data))
		}
		switch {
		case !f.HasCRC:
			noCRC++
			t.Errorf("%s (%d bytes): DONE without a CRC recorded", src, len(data))
		case f.CRC != crcOf(data):
			t.Errorf("%s: CRC %#x recorded, the source's is %#x", src, f.CRC, crcOf(data))
		}
		if got, err := os.ReadFile(f.Dest); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s differs from its source %s (%d vs %d bytes, %v)", f.Dest, src, len(got), len(data), err)
		}
		if _, err := os.Stat(flush.TempPath(f.Dest)); !os.IsNotExist(err) {
			t.Errorf("partial copy of %s left behind (%v)", f.Dest, err)
		}
	}
	return noCRC
}

// crashFlush writes the checkpoint files of flush gen, replaces the
// transfer file's FILES with them and issues RUN with the given BW.
func crashFlush(t *testing.T, n *node, rng *rand.Rand, gen int, bw float64) map[string][]byte {
	t.Helper()
	// Empty, tiny, around a page, around a buffer, and a few MiB.
	crashSizes := [...]int{0, 1, 4095, 4096, 65537, 1 << 20, 3<<20 + 17, 4 << 20}
	srcs := map[string][]byte{}
	dests := map[string]string{}
	for i := range 5 {
		size := crashSizes[rng.IntN(len(crashSizes))]
		if rng.IntN(4) == 0 {
			size = rng.IntN(4 << 20)
		}
		name := fmt.Sprintf("g%03d-f%d.ckpt", gen, i)
		p, data := n.checkpoint(name, size)
		srcs[p] = data
		dests[p] = filepath.Join(n.pfs, fmt.Sprintf("ckpt.%d", gen), name)
	}
	n.library(func(t *hashfile.Tree) {
		t.Unset(transfer.KeyFiles)
		for src, data := range srcs {
			transfer.AddFile(t, src, dests[src], int64(len(data)))
		}
		transfer.SetBW(t, bw)
		transfer.SetCommand(t, transfer.Run)
	})
	return srcs
}

// crashFlags draws the daemon's tuning for one start: how often it commits
// and how it verifies, so that kills land in every phase of a copy.
func crashFlags(rng *rand.Rand) []string {
	return []string{
		"--sync-bytes=" + []string{"65536", "262144", "1048576"}[rng.IntN(3)],
		"--sync-interval=" + []string{"10ms", "50ms", "200ms"}[rng.IntN(3)],
		"--buf-size=" + []string{"65536", "1048576"}[rng.IntN(2)],
		"--verify=" + []string{"off", "before", "after", "both"}[rng.IntN(4)],
	}
}

// pendingBytes sums SIZE - WRITTEN over the files not yet complete.
func pendingBytes(v transfer.View) int64 {
	var n int64
	for _, f := range v.Files {
		if f.Pending() {
			n += max(f.Size-f.Written, 0)
		}
	}
	return n
}

// checkAfterKill checks the durability promise for every file of the
// flush with the daemon dead: WRITTEN never exceeds the bytes of the copy
// that equal the source, and a file under its final name is complete. It
// returns the bytes of WRITTEN not backed by the copy, the bytes of WRITTEN
// checked, and whether the flush still had bytes to copy.
func checkAfterKill(t *testing.T, n *node, srcs map[string][]byte) (lost, checked int64, pending bool, problems int) {
	t.Helper()
	tree, err := n.store.Read()
	if err != nil {
		t.Fatalf("the transfer file does not decode after a kill: %v", err)
	}
	v := transfer.Read(tree)
	errorf := func(format string, args ...any) {
		t.Helper()
		problems++
		t.Errorf(format, args...)
	}
	for src, data := range srcs {
		f, ok := file(v, src)
		if !ok {
			errorf("%s: FILES entry lost", src)
			continue
		}
		if f.Problem != nil {
			errorf("%s: entry malformed after a kill: %v", src, f.Problem)
			continue
		}
		pending = pending || f.Pending()
		match, err := matchingPrefix(f.Dest, data)
		if err != nil {
			t.Fatal(err)
		}
		checked += f.Written
		if f.Written > match {
			lost += f.Written - match
			errorf("%s: WRITTEN %d but only %d bytes of its copy equal the source", src, f.Written, match)
		}
		final, err := os.ReadFile(f.Dest)
		switch {
		case err == nil && !bytes.Equal(final, data):
			errorf("%s: a copy that differs from the source (%d of %d bytes) sits under the final name", f.Dest, len(final), len(data))
		case err != nil && !os.IsNotExist(err):
			t.Fatal(err)
		case err != nil && f.Written == f.Size && f.Size > 0:
			errorf("%s: WRITTEN = SIZE = %d but the destination is missing", src, f.Size)
		}
		if f.HasCRC && f.CRC != crcOf(data) {
			errorf("%s: CRC %#x recorded, the source's is %#x", src, f.CRC, crcOf(data))
		}
	}
	return lost, checked, pending, problems
}

// TestCompletionIsOneUpdate watches the transfer file throughout a flush of
// many files: no reader may ever see a file with WRITTEN = SIZE but no CRC,
// the state a kill between two separate updates would leave behind.
func TestCompletionIsOneUpdate(t *testing.T) {
	n := newNode(t)
	want := map[string]uint32{}
	for i := range 30 {
		name := fmt.Sprintf("rank_%02d.ckpt", i)
		src, data := n.checkpoint(name, 100000+i)
		want[src] = crcOf(data)
		n.add(src, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 3e6) // about a second: many readings land mid-flush
		transfer.SetCommand(tr, transfer.Run)
	})
	n.start()
	readings := 0
	deadline := time.Now().Add(settle)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no DONE within %v", settle)
		}
		tree, err := n.store.Read()
		must(t, err)
		v := transfer.Read(tree)
		readings++
		for _, f := range v.Files {
			if f.Written == f.Size && (!f.HasCRC || f.CRC != want[f.Src]) {
				t.Fatalf("reading %d: %s complete with CRC %#x (recorded %v), want %#x", readings, f.Src, f.CRC, f.HasCRC, want[f.Src])
			}
		}
		if done(v) {
			break
		}
	}
	t.Logf("%d readings during the flush", readings)
}
