package test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// frame wraps a packed tree in a kvtree header and trailing CRC that agree
// with it, so that the decoder gets past the framing to the tree itself.
func frame(body []byte) []byte {
	size := hashfile.HeaderSize + len(body) + 4
	b := binary.BigEndian.AppendUint32(nil, hashfile.Magic)
	b = binary.BigEndian.AppendUint16(b, hashfile.FileType)
	b = binary.BigEndian.AppendUint16(b, hashfile.Version)
	b = binary.BigEndian.AppendUint64(b, uint64(size))
	b = binary.BigEndian.AppendUint32(b, hashfile.FlagCRC)
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// packed returns the packed tree of an encoded image (header and CRC cut).
func packed(img []byte) []byte {
	return append([]byte{}, img[hashfile.HeaderSize:len(img)-4]...)
}

// undecodable is a transfer file image the daemon cannot decode, and the
// words its error must contain.
type undecodable struct {
	name string
	img  func(good []byte) []byte
	want string
}

func undecodables() []undecodable {
	return []undecodable{
		{"corrupt CRC", func(good []byte) []byte {
			b := bytes.Clone(good)
			b[len(b)/2] ^= 0x40
			return b
		}, "CRC mismatch"},
		{"truncated", func(good []byte) []byte { return bytes.Clone(good[:len(good)*2/3]) }, "size mismatch"},
		{"truncated header", func(good []byte) []byte { return bytes.Clone(good[:11]) }, "truncated header"},
		{"truncated tree in a consistent frame", func(good []byte) []byte {
			body := packed(good)
			return frame(body[:len(body)-7])
		}, "truncated"},
		{"header size beyond the file", func(good []byte) []byte {
			b := bytes.Clone(good)
			binary.BigEndian.PutUint64(b[8:], 1<<62)
			return b
		}, "size mismatch"},
		{"bad magic", func(good []byte) []byte {
			b := bytes.Clone(good)
			b[0] ^= 0xff
			return b
		}, "bad magic"},
		{"huge top-level count", func([]byte) []byte {
			body := binary.BigEndian.AppendUint32(nil, 0xffffffff)
			return frame(append(body, "FILES\x00\x00\x00\x00\x00"...))
		}, "element count 4294967295 exceeds"},
		{"huge nested count", func([]byte) []byte {
			body := binary.BigEndian.AppendUint32(nil, 1)
			body = append(body, "FILES\x00"...)
			body = binary.BigEndian.AppendUint32(body, 0x7fffffff)
			return frame(append(body, "/cache/a\x00\x00\x00\x00\x00"...))
		}, "element count 2147483647 exceeds"},
		{"nesting 100000 levels deep", func([]byte) []byte {
			var body []byte
			for range 100000 {
				body = binary.BigEndian.AppendUint32(body, 1)
				body = append(body, 'k', 0)
			}
			return frame(binary.BigEndian.AppendUint32(body, 0))
		}, "nesting deeper than"},
		{"duplicate key", func([]byte) []byte {
			body := binary.BigEndian.AppendUint32(nil, 2)
			body = append(body, "COMMAND\x00\x00\x00\x00\x00COMMAND\x00\x00\x00\x00\x00"...)
			return frame(body)
		}, "duplicate key"},
		{"trailing data", func(good []byte) []byte { return frame(append(packed(good), 0, 0, 0)) }, "trailing data"},
	}
}

// TestHostileTransferFiles feeds one running daemon, in the middle of a
// throttled flush, transfer files it cannot decode, one after the other.
// For each it must log an error naming the file and the problem, stay
// alive, and leave the file exactly as it found it; once the good file is
// back it must go on, and the flush must complete with the data intact.
func TestHostileTransferFiles(t *testing.T) {
	testenv.Long(t, "a daemon per hostile transfer file")
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 24*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, slowBW)
		transfer.SetCommand(t, transfer.Run)
	})
	// At debug level: a retry's "copy" line, which the loop waits for, is
	// logged at debug.
	d := n.start("--sync-interval=100ms", "--reread=200ms", "--poll=50ms", "--log-level=debug")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })

	copyMark := 0
	for _, tc := range undecodables() {
		// Swap the bad image in while a copy is under way, so that the
		// daemon also tries to record progress in it.
		d.WaitLogAfter(copyMark, settle, "\tcopy\t")
		good := readRaw(t, n.transfer)
		bad := tc.img(good)
		if _, err := hashfile.Decode(bad); err == nil {
			t.Fatalf("%s: the hostile image decodes", tc.name)
		}
		mark := d.LogMark()
		good = swapRaw(t, n.transfer, bad)
		line := d.WaitLogAfter(mark, settle, "cannot use the transfer file", n.transfer, tc.want)
		t.Logf("%s: %d bytes: %s", tc.name, len(bad), strings.TrimSpace(truncate(line, 300)))
		// The copy cannot record its progress: wait for the daemon's
		// attempt to record that as an ERROR, a second write refused,
		// before checking that it left the file alone.
		d.WaitLogAfter(mark, settle, "cannot record ERROR in the transfer file", tc.want)
		if !d.Alive() {
			t.Fatalf("%s: the daemon died", tc.name)
		}
		if got := readRaw(t, n.transfer); !bytes.Equal(got, bad) {
			t.Fatalf("%s: the daemon rewrote a transfer file it cannot decode", tc.name)
		}
		copyMark = d.LogMark()
		swapRaw(t, n.transfer, good)
		d.WaitLogAfter(copyMark, settle, "transfer file readable again")
		v := n.view()
		if v.State != transfer.Running || v.Done {
			t.Fatalf("%s: STATE %s DONE %v once the good file is back", tc.name, v.State, v.Done)
		}
		durablePrefixOK(t, v.Files[0], data)
	}
	n.library(func(t *hashfile.Tree) { transfer.SetBW(t, noLimit) })
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// TestHostileEntries gives the daemon FILES entries with bad values. Each
// must get an ERROR that names the key and the bad value, must not be copied, and must
// keep the flush from being DONE, while sound entries are flushed; once the
// library rewrites the entries properly, everything is flushed.
func TestHostileEntries(t *testing.T) {
	n := newNode(t)
	okSrc, okData := n.checkpoint("fine.ckpt", 10000)
	n.add(okSrc, n.dest("fine.ckpt"))
	type badEntry struct {
		name string
		edit func(e *hashfile.Tree) // applied to a sound entry
		want []string               // in the ERROR
	}
	bads := []badEntry{
		{"size-word", func(e *hashfile.Tree) { e.SetValue(transfer.KeySize, "abc") }, []string{"SIZE", `"abc"`}},
		{"size-negative", func(e *hashfile.Tree) { e.SetValue(transfer.KeySize, "-5") }, []string{"SIZE", `"-5"`}},
		{"size-float", func(e *hashfile.Tree) { e.SetValue(transfer.KeySize, "1e3") }, []string{"SIZE", `"1e3"`}},
		{"size-overflow", func(e *hashfile.Tree) { e.SetValue(transfer.KeySize, "99999999999999999999999") }, []string{"SIZE", "99999999999999999999999"}},
		{"size-beyond-int64", func(e *hashfile.Tree) { e.SetValue(transfer.KeySize, "18446744073709551615") }, []string{"SIZE", "18446744073709551615", "too large"}},
		{"size-two-values", func(e *hashfile.Tree) { e.Get(transfer.KeySize).Set("7") }, []string{"SIZE", "one value"}},
		{"size-missing", func(e *hashfile.Tree) { e.Unset(transfer.KeySize) }, []string{"no SIZE"}},
		{"written-word", func(e *hashfile.Tree) { e.SetValue(transfer.KeyWritten, "xyz") }, []string{"WRITTEN", `"xyz"`}},
		{"written-negative", func(e *hashfile.Tree) { e.SetValue(transfer.KeyWritten, "-1") }, []string{"WRITTEN", `"-1"`}},
		{"destination-missing", func(e *hashfile.Tree) { e.Unset(transfer.KeyDestination) }, []string{"no DESTINATION"}},
		{"destination-empty", func(e *hashfile.Tree) { e.SetValue(transfer.KeyDestination, "") }, []string{"no DESTINATION"}},
	}
	srcs := map[string][]byte{okSrc: okData}
	for _, b := range bads {
		p, data := n.checkpoint(b.name+".ckpt", 1000)
		srcs[p] = data
		n.library(func(t *hashfile.Tree) {
			transfer.AddFile(t, p, n.dest(b.name+".ckpt"), int64(len(data)))
			b.edit(t.Lookup(transfer.KeyFiles, p))
		})
	}
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	d := n.start()
	v := n.waitFor("every bad entry in ERROR and the sound file flushed", settle, func(v transfer.View) bool {
		for _, f := range v.Files {
			if f.Src == okSrc && (f.Written != f.Size || !f.HasCRC) || f.Src != okSrc && f.Error == "" {
				return false
			}
		}
		return true
	})
	for _, b := range bads {
		f, _ := file(v, filepath.Join(n.cache, b.name+".ckpt"))
		t.Logf("%s: ERROR %q", b.name, f.Error)
		for _, w := range b.want {
			if !strings.Contains(f.Error, w) {
				t.Errorf("%s: ERROR %q does not say %q", b.name, f.Error, w)
			}
		}
		if _, err := os.Stat(n.dest(b.name + ".ckpt")); !os.IsNotExist(err) {
			t.Errorf("%s: a malformed entry was copied (%v)", b.name, err)
		}
	}
	if v.Done {
		t.Fatal("DONE set while entries are malformed")
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	// The library rewrites the entries properly: all of them are flushed.
	n.library(func(t *hashfile.Tree) {
		for src, data := range srcs {
			if src != okSrc {
				transfer.AddFile(t, src, n.dest(filepath.Base(src)), int64(len(data)))
			}
		}
		transfer.SetCommand(t, transfer.Run)
	})
	v = n.waitFor("DONE once the entries are sound", settle, done)
	checkFlushed(t, v, srcs)
}

// TestHostileWrittenBeyondSize: WRITTEN above SIZE is a value no library
// or daemon ever writes. The protocol sets DONE only when every file has
// WRITTEN = SIZE, and no byte of this file reached the destination; the
// entry must get an ERROR naming the problem (or be copied), never DONE
// with nothing at the destination.
func TestHostileWrittenBeyondSize(t *testing.T) {
	// WRITTEN beyond SIZE describes no real copy: the daemon copies the
	// file again from the start, and only then is the flush DONE.
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 1000)
	n.library(func(t *hashfile.Tree) {
		transfer.AddFile(t, src, n.dest("a.ckpt"), int64(len(data)))
		t.Lookup(transfer.KeyFiles, src).SetUint(transfer.KeyWritten, 5000)
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start()
	v := n.waitFor("DONE", settle, done)
	f := v.Files[0]
	if f.Written != f.Size || !f.HasCRC || f.CRC != crcOf(data) {
		t.Fatalf("WRITTEN %d CRC %#x (%v) after the recopy", f.Written, f.CRC, f.HasCRC)
	}
	sameFile(t, f.Dest, data)
	d.WaitLog("WRITTEN 5000 exceeds SIZE 1000", settle)
}

// TestHostileLimits gives the daemon malformed BW and PERCENT values in the
// middle of a throttled flush: it must say so and keep the last good
// limit, which shows in the rate the copy keeps.
func TestHostileLimits(t *testing.T) {
	testenv.Long(t, "transfer files and entries at the size limits")
	const bw = 1e6
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 48*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, bw)
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start("--sync-interval=100ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	for _, tc := range []struct{ key, value, want string }{
		{transfer.KeyBW, "fast", `BW \"fast\" is not a number`},
		{transfer.KeyBW, "-5", `BW \"-5\" is not a non-negative number`},
		{transfer.KeyBW, "NaN", `BW \"NaN\" is not a non-negative number`},
		{transfer.KeyBW, "1e400", `BW \"1e400\" is not a number`},
		{transfer.KeyPercent, "lots", `PERCENT \"lots\" is not a number`},
		{transfer.KeyPercent, "-1", `PERCENT \"-1\" is not a non-negative number`},
	} {
		mark := d.LogMark()
		n.library(func(t *hashfile.Tree) { t.SetValue(tc.key, tc.value) })
		d.WaitLogAfter(mark, settle, "transfer file value not taken as written", tc.want)
		if tc.key != transfer.KeyBW {
			continue
		}
		// Had the limit been dropped, the rest of the file would go at
		// disk speed; kept, 1 MB more takes about a second.
		w0, t0 := n.view().Files[0].Written, time.Now()
		v := n.waitFor("1 MB more durable", settle, func(v transfer.View) bool { return v.Files[0].Written >= w0+1e6 || v.Done })
		rate := float64(v.Files[0].Written-w0) / time.Since(t0).Seconds()
		t.Logf("BW %q: %.2f MB/s after it (limit kept: %.2f MB/s)", tc.value, rate/1e6, bw/1e6)
		if rate > 2*bw {
			t.Fatalf("BW %q: the copy went on at %.1f MB/s, the last good limit is %.1f MB/s", tc.value, rate/1e6, bw/1e6)
		}
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, noLimit)
		transfer.SetPercent(t, 0)
	})
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
}

// TestHostileGiantKeys gives the daemon keys of 1 MiB: an unknown top-level
// key (kept, and ignored), a source path, a destination path and a COMMAND.
// The daemon must keep running, record an ERROR on the entries it cannot
// copy, flush the rest, and leave the library's keys in place.
func TestHostileGiantKeys(t *testing.T) {
	giant := strings.Repeat("x", 1<<20)
	n := newNode(t)
	okSrc, okData := n.checkpoint("fine.ckpt", 10000)
	n.add(okSrc, n.dest("fine.ckpt"))
	badSrc := filepath.Join(n.cache, giant)
	destSrc, destData := n.checkpoint("longdest.ckpt", 1000)
	n.library(func(t *hashfile.Tree) {
		t.Set(giant).SetValue("NOTE", "unknown to the protocol")
		transfer.AddFile(t, badSrc, n.dest("giant.ckpt"), 1000)
		transfer.AddFile(t, destSrc, filepath.Join(n.pfs, giant), int64(len(destData)))
		t.SetValue(transfer.KeyCommand, "RUN"+giant)
	})
	d := n.start()
	d.WaitLog("unknown COMMAND ignored", settle)
	if v := n.view(); v.State != transfer.Stopped || v.Files[0].Written != 0 {
		t.Fatalf("a 1 MiB COMMAND changed something: STATE %s", v.State)
	}
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	// Every pass parses a 3 MiB transfer file: on a loaded machine under
	// the race detector a pass takes seconds, hence the longer bound.
	v := n.waitFor("ERROR on both giant entries and the sound file flushed", 4*settle, func(v transfer.View) bool {
		ok, _ := file(v, okSrc)
		a, _ := file(v, badSrc)
		b, _ := file(v, destSrc)
		return ok.Written == ok.Size && ok.HasCRC && a.Error != "" && b.Error != ""
	})
	for _, src := range []string{badSrc, destSrc} {
		f, _ := file(v, src)
		t.Logf("ERROR on a 1 MiB %s: %d bytes: %s", map[bool]string{true: "source", false: "destination"}[src == badSrc], len(f.Error), truncate(f.Error, 200))
		if !strings.Contains(f.Error, "file name too long") {
			t.Errorf("ERROR %q does not name the problem", truncate(f.Error, 200))
		}
	}
	if v.Done {
		t.Fatal("DONE with entries in error")
	}
	tree, err := n.store.Read()
	must(t, err)
	if note, _ := tree.Lookup(giant).Value("NOTE"); note != "unknown to the protocol" {
		t.Fatal("the library's unknown 1 MiB key was not kept")
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	n.library(func(t *hashfile.Tree) {
		t.Get(transfer.KeyFiles).Unset(badSrc)
		transfer.AddFile(t, destSrc, n.dest("longdest.ckpt"), int64(len(destData)))
		transfer.SetCommand(t, transfer.Run)
	})
	v = n.waitFor("DONE", settle, done)
	checkFlushed(t, v, map[string][]byte{okSrc: okData, destSrc: destData})
}

// TestHostileFileNoBusyLoop: while the transfer file cannot be decoded, the
// daemon waits for it to change (or for its next re-read); it must not spin.
// The case that tempts a loop to spin: a file in back-off whose retry falls
// due while the transfer file is bad. The two-second window is the measurement
// itself; a spinning daemon burns about one CPU for all of it, an idle one
// next to nothing.
func TestHostileFileNoBusyLoop(t *testing.T) {
	n := newNode(t)
	missing := filepath.Join(n.cache, "missing.ckpt")
	n.library(func(tr *hashfile.Tree) {
		transfer.AddFile(tr, missing, n.dest("missing.ckpt"), 10)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--retry-min=100ms", "--retry-max=100ms")
	n.waitFor("ERROR on the missing source", settle, func(v transfer.View) bool { return v.Files[0].Error != "" })
	good := readRaw(t, n.transfer)
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x40
	mark := d.LogMark()
	writeRaw(t, n.transfer, bad)
	d.WaitLogAfter(mark, settle, "cannot use the transfer file", "CRC mismatch")
	const window = 2 * time.Second
	before := cpuTime(t, d.Pid())
	time.Sleep(window)
	used := cpuTime(t, d.Pid()) - before
	t.Logf("CPU time over %v with an undecodable transfer file: %v", window, used)
	if used > window/4 {
		t.Errorf("the daemon used %v of CPU in %v while the transfer file could not be decoded: it spins", used, window)
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	if got := readRaw(t, n.transfer); !bytes.Equal(got, bad) {
		t.Fatal("the daemon rewrote a transfer file it cannot decode")
	}
}

// cpuTime returns the user+system CPU time of process pid, from
// /proc/PID/stat (in clock ticks of 1/100 s, as on every Linux platform Go
// supports).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	must(t, err)
	// The command name may hold spaces: fields are counted after its ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
