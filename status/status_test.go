package status

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testenv.Golden(t, filepath.Join("testdata", name), got)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// snapshotTree is a transfer file in the middle of a flush: one file
// complete, one partly copied, one in error, one waiting, one malformed.
func snapshotTree(written int64) *hashfile.Tree {
	tr := hashfile.New()
	transfer.SetCommand(tr, transfer.Run)
	transfer.SetState(tr, transfer.Running)
	transfer.SetBW(tr, 52428800)
	transfer.SetPercent(tr, 25)
	add := func(src, dest string, size, w int64) *transfer.File {
		transfer.AddFile(tr, src, dest, size)
		f := transfer.File{Src: src, Dest: dest, Size: size}
		transfer.SetWritten(tr, f, w)
		return &f
	}
	done := add("/dev/shm/scr.1001/dataset.1/rank_0.sion", "/p/lustre/user1/sim/scr.dataset.1/rank_0.sion", 9437184, 9437184)
	transfer.SetCRC(tr, *done, 0x1a2b3c4d)
	transfer.SetWarning(tr, done.Src, "SION block size differs from the file system's")
	add("/dev/shm/scr.1001/dataset.1/rank_1.ckpt", "/p/lustre/user1/sim/scr.dataset.1/rank_1.ckpt", 104857600, written)
	add("/dev/shm/scr.1001/dataset.1/rank_2.ckpt", "/p/lustre/user1/sim/scr.dataset.1/rank_2.ckpt", 524294, 0)
	transfer.SetError(tr, "/dev/shm/scr.1001/dataset.1/rank_2.ckpt", "open /p/lustre/user1/sim/scr.dataset.1/rank_2.ckpt: permission denied")
	add("/dev/shm/scr.1001/dataset.1/rank_3.ckpt", "/p/lustre/user1/sim/scr.dataset.1/rank_3.ckpt", 2048, 0)
	tr.Set(transfer.KeyFiles).Set("/dev/shm/scr.1001/dataset.1/broken").SetValue(transfer.KeySize, "12x")
	// The daemon began the flush 5 s before the first reading, rank_0
	// already complete.
	transfer.BeginFlush(tr, t0.Add(-5*time.Second), 9437184)
	return tr
}

// snapshotReport is three readings: the copy of rank_1 is seen at 10 MiB,
// then two commits of 15 MiB 2.5 s apart (6 MiB/s); the last is shown.
func snapshotReport() Report {
	m := NewMeter()
	Build("/dev/shm/scr.1001/transfer.scrinfo", t0, snapshotTree(10<<20), m)
	Build("/dev/shm/scr.1001/transfer.scrinfo", t0.Add(2500*time.Millisecond), snapshotTree(25<<20), m)
	return Build("/dev/shm/scr.1001/transfer.scrinfo", t0.Add(5*time.Second), snapshotTree(40<<20), m)
}

// TestStatusGolden: the text form at the sizes of common terminals, and
// without a terminal; the JSON form.
func TestStatusGolden(t *testing.T) {
	r := snapshotReport()
	golden(t, "status.txt", []byte(Render(r, Layout{})))
	golden(t, "status-80x24.txt", []byte(Render(r, Layout{Width: 80, Height: 24})))
	golden(t, "status-100x30.txt", []byte(Render(r, Layout{Width: 100, Height: 30})))
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "status.json", append(b, '\n'))
}

// manyTree is a transfer file of n files: the first done complete, one in
// error, the rest pending.
func manyTree(n, done int) *hashfile.Tree {
	tr := hashfile.New()
	transfer.SetCommand(tr, transfer.Run)
	transfer.SetState(tr, transfer.Running)
	for i := range n {
		src := fmt.Sprintf("/dev/shm/scr.1001/dataset.7/rank_%d.ckpt", i)
		f := transfer.File{Src: src, Dest: fmt.Sprintf("/p/lustre/user1/sim/scr.dataset.7/rank_%d.ckpt", i), Size: 1 << 20}
		transfer.AddFile(tr, f.Src, f.Dest, f.Size)
		if i < done {
			transfer.SetWritten(tr, f, f.Size)
			transfer.SetCRC(tr, f, uint32(i))
		}
	}
	transfer.SetError(tr, "/dev/shm/scr.1001/dataset.7/rank_500.ckpt", "open: input/output error")
	return tr
}

// TestLongListsFold: one status on 1000 files prints a screenful, not 2000
// lines, keeps the file in error in view, and counts what it folded; --all
// prints them all.
func TestLongListsFold(t *testing.T) {
	r := Build("/dev/shm/scr.1001/transfer.scrinfo", t0, manyTree(1000, 400), nil)
	for _, o := range []Layout{{}, {Width: 80, Height: 24}, {Width: 100, Height: 30}} {
		out := Render(r, o)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		limit := o.Height
		if limit == 0 {
			limit = 2*DefaultFiles + 1 + 5 // one ERROR line; header, fold and totals
		}
		if len(lines) > limit {
			t.Errorf("%dx%d: %d lines, want at most %d", o.Width, o.Height, len(lines), limit)
		}
		if !strings.Contains(out, "rank_500.ckpt") || !strings.Contains(out, "ERROR: open: input/output error") {
			t.Errorf("%dx%d: the file in error is not shown:\n%s", o.Width, o.Height, out)
		}
		if !strings.Contains(out, "more files (") || !strings.Contains(out, "--all shows every file") {
			t.Errorf("%dx%d: no fold line:\n%s", o.Width, o.Height, out)
		}
		if !strings.Contains(out, "total: 1000 files, 400 complete, 1 in error") {
			t.Errorf("%dx%d: totals:\n%s", o.Width, o.Height, out)
		}
	}
	golden(t, "status-1000-80x24.txt", []byte(Render(r, Layout{Width: 80, Height: 24})))
	all := Render(r, Layout{All: true})
	if n := strings.Count(all, "\n"); n < 2000 || strings.Contains(all, "more files") {
		t.Errorf("--all: %d lines", n)
	}
}

func TestStatusFigures(t *testing.T) {
	r := snapshotReport()
	tot := r.Totals
	if tot.Files != 4 || tot.Complete != 1 || tot.InError != 2 {
		t.Errorf("totals %+v: want 4 sound files, 1 complete, 2 in error (one ERROR, one malformed)", tot)
	}
	if tot.Size != 9437184+104857600+524294+2048 || tot.Written != 9437184+40<<20 {
		t.Errorf("size %d written %d", tot.Size, tot.Written)
	}
	// Two commits of 15 MiB, each in 2.5 s.
	f := r.Files[1]
	if f.Rate == nil || *f.Rate != 6<<20 {
		t.Fatalf("rate of the file being copied: %v, want 6 MiB/s", f.Rate)
	}
	if f.ETA == nil || *f.ETA != 10 {
		t.Errorf("ETA %v, want 10 s (60 MiB left at 6 MiB/s)", f.ETA)
	}
	if tot.Elapsed == nil || *tot.Elapsed != 5 || tot.Average == nil || *tot.Average != 6<<20 {
		t.Errorf("elapsed %v average %v, want 5 s and 6 MiB/s", tot.Elapsed, tot.Average)
	}
	if r.Files[2].State != transfer.StateError || r.Files[4].State != transfer.StateInvalid || r.Files[0].CRC != "0x1a2b3c4d" {
		t.Errorf("file states: %+v", r.Files)
	}
	if r.Complete {
		t.Error("complete with files left")
	}
	one := Build("/x", t0, snapshotTree(0), nil)
	if one.Totals.Elapsed != nil || one.Totals.Average != nil || one.Totals.Rate != nil {
		t.Errorf("a single reading has no rate, elapsed time or average: %+v", one.Totals)
	}
}

// TestFlushTimed: a single reading shows how long the flush has run and
// its average rate, from the daemon's record: so far while it runs, in
// all once FLAG DONE ended it; none without a record.
func TestFlushTimed(t *testing.T) {
	tr := snapshotTree(40 << 20)
	at := t0.Add(5 * time.Second)
	r := Build("/x", at, tr, nil)
	if r.Flush == nil || r.Flush.Elapsed != 10 || r.Flush.Written != 40<<20 || r.Flush.Average == nil ||
		*r.Flush.Average != 4<<20 || r.Flush.Ended != nil {
		t.Fatalf("running: %+v, want 10 s, 40 MiB, 4 MiB/s, not ended", r.Flush)
	}
	if out := Render(r, Layout{}); !strings.Contains(out, "total: 4 files, 1 complete, 2 in error; 10s so far, average 4.00 MiB/s\n") {
		t.Errorf("running, text:\n%s", out)
	}

	// The daemon ends it 20 s after it began, every sound file complete.
	for _, f := range transfer.Read(tr).Files {
		if f.Problem == nil {
			transfer.SetWritten(tr, f, f.Size)
			transfer.SetError(tr, f.Src, "")
			transfer.SetCRC(tr, f, 1)
		}
	}
	transfer.SetDone(tr, true)
	transfer.SetState(tr, transfer.Stopped)
	transfer.EndFlush(tr, t0.Add(15*time.Second), 0)
	r = Build("/x", t0.Add(time.Hour), tr, nil)
	gained := float64(114821126 - 9437184)
	if r.Flush == nil || r.Flush.Elapsed != 20 || r.Flush.Ended == nil || !r.Flush.Ended.Equal(t0.Add(15*time.Second)) ||
		r.Flush.Average == nil || *r.Flush.Average != gained/20 {
		t.Fatalf("ended: %+v, want 20 s ending at %v, %v B/s", r.Flush, t0.Add(15*time.Second), gained/20)
	}
	if out := Render(r, Layout{}); !strings.Contains(out, "; took 20s, average 5.03 MiB/s\n") {
		t.Errorf("ended, text:\n%s", out)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"flush":{"started":"2026-03-01T11:59:55Z","ended":"2026-03-01T12:00:15Z","elapsed_seconds":20,"written":105383942,"average_rate":5269197.1}`; !strings.Contains(string(b), want) {
		t.Errorf("JSON %s\nwant %s", b, want)
	}

	tr.Unset(transfer.KeyFlush)
	if r := Build("/x", at, tr, nil); r.Flush != nil || strings.Contains(Render(r, Layout{}), "took") {
		t.Errorf("no record, yet timed: %+v", r.Flush)
	}
}

// TestErrorIsNamed: a file in error is not shown as waiting.
func TestErrorIsNamed(t *testing.T) {
	out := Render(snapshotReport(), Layout{})
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "512 KiB") && !strings.Contains(l, "error: retrying") {
			t.Errorf("the file in error: %q", l)
		}
	}
	if !strings.Contains(out, "invalid: not copied") {
		t.Errorf("the malformed entry:\n%s", out)
	}
}

func TestRenderFitsTheTerminal(t *testing.T) {
	r := snapshotReport()
	for _, o := range []Layout{{Width: 40, Height: 8}, {Width: 80, Height: 12}, {Width: 80, Height: 24}, {Width: 100, Height: 30}, {Width: 200, Height: 50}} {
		out := Render(r, o)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for _, l := range lines {
			if w := ansi.StringWidth(l); w >= o.Width {
				t.Errorf("%dx%d: line of %d cells: %q", o.Width, o.Height, w, l)
			}
		}
		if len(lines) > o.Height {
			t.Errorf("%dx%d: %d lines", o.Width, o.Height, len(lines))
		}
		if !strings.Contains(out, "ERROR: open") {
			t.Errorf("%dx%d: the file in error is not shown:\n%s", o.Width, o.Height, out)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{0, "0s"}, {1499 * time.Millisecond, "1s"}, {65 * time.Second, "1m05s"}, {2*time.Hour + 5*time.Minute, "2h05m"}, {200 * time.Hour, "8d08h"}} {
		if got := FormatDuration(tc.d); got != tc.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	for _, tc := range []struct {
		src, dest string
		width     int
		want      string
	}{
		{"/a/b", "/c/d", 0, "/a/b → /c/d"},
		{"/a/b", "/c/d", 40, "/a/b → /c/d"},
		{"/cache/x/rank_0.ckpt", "/pfs/y/rank_0.ckpt", 30, "…/rank_0.ckpt → …y/rank_0.ckpt"},
		{"/s", "/pfs/long/path/to/rank_0.ckpt", 20, "/s → …to/rank_0.ckpt"},
	} {
		if got := pathPair(tc.src, tc.dest, tc.width); got != tc.want {
			t.Errorf("pathPair(%q, %q, %d) = %q, want %q", tc.src, tc.dest, tc.width, got, tc.want)
		}
	}
}
