package test

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Environment knobs of TestScale.
const (
	scaleDaemonsEnv = "SCR_SCALE_DAEMONS" // daemons (default 32)
	scaleMiBEnv     = "SCR_SCALE_MIB"     // MiB each flushes (default 16)
	scaleBWEnv      = "SCR_SCALE_BW"      // BW of each, bytes/s (default 3.4e6)
)

// TestScale runs many daemons on one machine, each with its own transfer
// file and cache, flushing into one destination tree at the same time, each
// under the same BW limit. All must finish with their data intact, within
// a generous time, and none may exceed its BW by more than 3 % over its
// whole flush (a limit a slow machine cannot break). The spread of their
// completion times (slowest/fastest) is logged, not asserted: it measures
// the machine's scheduling as much as the daemon, and a loaded machine
// widens it.
//
// The default flush lasts about 5 s at its limit: the throttle lets a copy
// start with a burst of 0.1 s of transfer, which is 2 % of 5 s but 5 % of a
// 2 s flush, so shorter flushes would measure the burst rather than the
// limit.
func TestScale(t *testing.T) {
	testenv.Long(t, "flushes thousands of files")
	count := envInt(t, scaleDaemonsEnv, 32)
	size := int64(envInt(t, scaleMiBEnv, 16)) * mib
	bw := envFloat(t, scaleBWEnv, 3.4e6)
	expected := time.Duration(float64(size) / bw * float64(time.Second))
	t.Logf("%d daemons, %d MiB each at BW %.2f MB/s: about %v each", count, size/mib, bw/1e6, expected.Round(time.Millisecond))

	shared := filepath.Join(t.TempDir(), "pfs")
	nodes := make([]*node, count)
	procs := make([]*testenv.Process, count)
	srcs := make([]string, count)
	for i := range nodes {
		n := newNode(t)
		n.pfs = shared
		name := fmt.Sprintf("rank_%02d.ckpt", i)
		srcs[i], _ = n.checkpoint(name, int(size))
		n.add(srcs[i], n.dest(name))
		n.library(func(t *hashfile.Tree) { transfer.SetBW(t, bw) })
		nodes[i] = n
	}
	for i, n := range nodes {
		procs[i] = n.start()
	}
	for _, n := range nodes {
		n.waitFor("STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	}

	// RUN everywhere. Both ends of each flush are taken from the transfer
	// file's modification time (the library's RUN, the daemon's DONE), so
	// that polling delays do not enter the figures.
	runAt := make([]time.Time, count)
	for i, n := range nodes {
		n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
		runAt[i] = mtime(t, n.transfer)
	}
	doneAt := make([]time.Time, count)
	left := count
	if !testenv.Until(10*expected+time.Minute, func() bool {
		for i, n := range nodes {
			if !doneAt[i].IsZero() {
				continue
			}
			tree, err := n.store.Read()
			if err != nil {
				t.Fatalf("daemon %d: %v", i, err)
			}
			if v := transfer.Read(tree); done(v) {
				doneAt[i] = mtime(t, n.transfer)
				left--
				checkFlushedFile(t, v, srcs[i])
			}
		}
		return left == 0
	}) {
		t.Fatalf("%d of %d daemons not DONE after %v", left, count, time.Since(runAt[0]))
	}

	durs := make([]time.Duration, count)
	worst := 0.0
	for i := range nodes {
		durs[i] = doneAt[i].Sub(runAt[i])
		rate := float64(size) / durs[i].Seconds()
		worst = max(worst, rate/bw)
		t.Logf("daemon %2d: RUN to DONE %v, %.3f MB/s = %.3f × BW", i, durs[i].Round(time.Millisecond), rate/1e6, rate/bw)
		if rate > bw*1.03 {
			t.Errorf("daemon %d flushed at %.3f MB/s, above its BW of %.3f MB/s (+3 %%)", i, rate/1e6, bw/1e6)
		}
	}
	sorted := slices.Clone(durs)
	slices.Sort(sorted)
	ratio := sorted[count-1].Seconds() / sorted[0].Seconds()
	t.Logf("RUN to DONE: fastest %v, median %v, slowest %v: slowest/fastest %.3f; highest rate %.3f × BW",
		sorted[0].Round(time.Millisecond), sorted[count/2].Round(time.Millisecond), sorted[count-1].Round(time.Millisecond), ratio, worst)
	for i, n := range nodes {
		n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Exit) })
		if code := procs[i].Wait(settle); code != 0 {
			t.Errorf("daemon %d: exit code %d after EXIT", i, code)
		}
	}
}

// mtime returns the modification time of path.
func mtime(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	return fi.ModTime()
}

// checkFlushedFile checks one completed file of v against its source on
// disk, without holding the source in memory.
func checkFlushedFile(t *testing.T, v transfer.View, src string) {
	t.Helper()
	f, ok := file(v, src)
	if !ok {
		t.Fatalf("%s: FILES entry missing", src)
	}
	a, err := os.Open(src)
	must(t, err)
	defer a.Close()
	b, err := os.Open(f.Dest)
	must(t, err)
	defer b.Close()
	crc, same := sameContent(t, a, b)
	if !same {
		t.Errorf("%s differs from its source %s", f.Dest, src)
	}
	if f.Written != f.Size || !f.HasCRC || f.CRC != crc || f.Error != "" {
		t.Errorf("%s: WRITTEN %d of %d, CRC %#x (recorded %v), ERROR %q; the source's CRC is %#x",
			src, f.Written, f.Size, f.CRC, f.HasCRC, f.Error, crc)
	}
}

// sameContent compares two readers to their ends and returns the CRC32 of
// the first.
func sameContent(t *testing.T, a, b io.Reader) (crc uint32, same bool) {
	t.Helper()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	same = true
	for {
		na, erra := io.ReadFull(a, ba)
		nb, errb := io.ReadFull(b, bb)
		crc = crc32.Update(crc, crc32.IEEETable, ba[:na])
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			same = false
		}
		aEnd := erra == io.EOF || erra == io.ErrUnexpectedEOF
		bEnd := errb == io.EOF || errb == io.ErrUnexpectedEOF
		if erra != nil && !aEnd || errb != nil && !bEnd {
			t.Fatal(erra, errb)
		}
		if aEnd || bEnd {
			return crc, same && aEnd && bEnd
		}
	}
}
