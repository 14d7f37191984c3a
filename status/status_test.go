package status

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

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
// then two commits of 15 MiB 2.5 s apart; the last is shown.
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
	testenv.Golden(t, filepath.Join("testdata", "status.txt"), []byte(Render(r, Layout{})))
	testenv.Golden(t, filepath.Join("testdata", "status-80x24.txt"), []byte(Render(r, Layout{Width: 80, Height: 24})))
	testenv.Golden(t, filepath.Join("testdata", "status-100x30.txt"), []byte(Render(r, Layout{Width: 100, Height: 30})))
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, filepath.Join("testdata", "status.json"), append(b, '\n'))
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
			limit = DefaultFiles + 1 + 4 // one ERROR line; summary, header and fold
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
		if !strings.HasPrefix(out, "400/1000 files  400 MiB of 1000 MiB  40.0%  rate -  1 in error  RUNNING\n") {
			t.Errorf("%dx%d: totals:\n%s", o.Width, o.Height, out)
		}
	}
	testenv.Golden(t, filepath.Join("testdata", "status-1000-80x24.txt"), []byte(Render(r, Layout{Width: 80, Height: 24})))
	all := Render(r, Layout{All: true})
	if n := strings.Count(all, "\n"); n < 1000 || strings.Contains(all, "more files") {
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
	// Two commits of 15 MiB 2.5 s apart, read only at the commits: the
	// first is the starting point, its bytes may predate the first reading;
	// the second's 15 MiB may have taken the 5 s since the last reading
	// before the first, so the rate is not more than 3 MiB/s.
	f := r.Files[1]
	if f.Rate == nil || *f.Rate != 3<<20 {
		t.Fatalf("rate of the file being copied: %v, want 3 MiB/s", ptr(f.Rate))
	}
	if f.ETA == nil || *f.ETA != 20 {
		t.Errorf("ETA %v, want 20 s (60 MiB left at 3 MiB/s)", ptr(f.ETA))
	}
	if tot.Elapsed == nil || *tot.Elapsed != 5 || tot.Average == nil || *tot.Average != 3<<20 {
		t.Errorf("elapsed %v average %v, want 5 s and 3 MiB/s", ptr(tot.Elapsed), ptr(tot.Average))
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

// ptr shows an optional figure.
func ptr(f *float64) string {
	if f == nil {
		return "null"
	}
	return fmt.Sprint(*f)
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
	if out := Render(r, Layout{}); !strings.Contains(out, "  flush 10s so far, 4.00 MiB/s\n") {
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
	if out := Render(r, Layout{}); !strings.Contains(out, "  flush took 20s, 5.03 MiB/s\n") {
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
	if r := Build("/x", at, tr, nil); r.Flush != nil || strings.Contains(Render(r, Layout{}), "flush") {
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
}

func TestShortNames(t *testing.T) {
	for _, tc := range []struct {
		name         string
		files        [][2]string // source, destination
		srcDir, dDir string
		want         []string
	}{
		{"one file", [][2]string{{"/c/x/a.ckpt", "/p/y/a.ckpt"}}, "/c/x/", "/p/y/", []string{"a.ckpt"}},
		{"same names", [][2]string{{"/c/x/a", "/p/y/a"}, {"/c/x/b", "/p/y/b"}}, "/c/x/", "/p/y/", []string{"a", "b"}},
		{"subdirectories", [][2]string{{"/c/x/1/a", "/p/y/1/a"}, {"/c/x/2/a", "/p/y/2/a"}}, "/c/x/", "/p/y/", []string{"1/a", "2/a"}},
		{"renamed", [][2]string{{"/c/x/a", "/p/y/b"}, {"/c/x/c", "/p/y/c"}}, "/c/x/", "/p/y/", []string{"a → b", "c"}},
		{"a prefix of a name is not a directory", [][2]string{{"/c/ab", "/p/ab"}, {"/c/abc", "/p/abc"}}, "/c/", "/p/", []string{"ab", "abc"}},
		{"nothing in common but /", [][2]string{{"/c/a", "/p/a"}, {"/d/a", "/q/a"}}, "", "", []string{"/c/a → /p/a", "/d/a → /q/a"}},
		{"no destination", [][2]string{{"/c/a", ""}, {"/c/b", "/p/b"}}, "/c/", "/p/", []string{"a → (no DESTINATION)", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files []File
			for _, f := range tc.files {
				files = append(files, File{Source: f[0], Destination: f[1]})
			}
			n := shortNames(files)
			if n.srcDir != tc.srcDir || n.destDir != tc.dDir || strings.Join(n.of, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got %q %q %q, want %q %q %q", n.srcDir, n.destDir, n.of, tc.srcDir, tc.dDir, tc.want)
			}
		})
	}
}

// TestOnlyCompleteIsFull: a file in error, or pending, whose WRITTEN
// reached its SIZE is never drawn as a full bar at 100.0%; a complete one
// is.
func TestOnlyCompleteIsFull(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        File
		wantFull bool
	}{
		{"error at the end", File{Size: 1 << 20, Written: 1 << 20, State: transfer.StateError, Error: "fsync: input/output error"}, false},
		{"error nearly at the end", File{Size: 10000, Written: 9999, State: transfer.StateError, Error: "x"}, false},
		{"pending at the end", File{Size: 1 << 20, Written: 1 << 20, State: transfer.StatePending}, false},
		{"empty, pending", File{State: transfer.StatePending}, false},
		{"complete", File{Size: 1 << 20, Written: 1 << 20, State: transfer.StateComplete}, true},
		{"empty, complete", File{State: transfer.StateComplete}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range []int{6, 24} {
				line := fileProgress(tc.f, nil, w)
				full := strings.Contains(line, "["+strings.Repeat("█", w)+"]")
				if full != tc.wantFull || strings.Contains(line, "100.0%") != tc.wantFull {
					t.Errorf("bar of %d: %q, want full %v", w, line, tc.wantFull)
				}
			}
		})
	}
}

// TestRenderDaemon: the summary says whether a daemon serves the file and
// since when; without one, a file in error is not said to be retried.
func TestRenderDaemon(t *testing.T) {
	since := t0.Add(-60 * time.Second) // the reading is at t0 + 5 s
	for _, tc := range []struct {
		name string
		lv   Liveness
		want []string
		not  []string
	}{
		{"served", Liveness{Serving: true, PID: 4242, Since: since, Reason: "served by PID 4242"},
			[]string{"  RUNNING  PID 4242 up 1m05s\n", "error: retrying"}, []string{"NO DAEMON", "no daemon serves"}},
		{"killed", Liveness{Reason: "no daemon holds its lock /x/.t.lock (the daemon that served it has ended)"},
			[]string{"  RUNNING  NO DAEMON\n", "\n  no daemon serves this file: no daemon holds its lock", "error: no daemon retries it"},
			[]string{"error: retrying", "PID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := snapshotReport()
			r.SetLiveness(tc.lv)
			out := Render(r, Layout{})
			first, _, _ := strings.Cut(out, "\n")
			if !strings.HasSuffix(first+"\n", tc.want[0]) {
				t.Errorf("first line %q, want it to end with %q", first, tc.want[0])
			}
			for _, w := range tc.want[1:] {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("%q in:\n%s", w, out)
				}
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			wantJSON := `"daemon":{"serving":false,"since":null,"reason":"no daemon holds its lock`
			if tc.lv.Serving {
				wantJSON = `"daemon":{"serving":true,"pid":4242,"since":"2026-03-01T11:59:00Z","reason":"served by PID 4242"}`
			}
			if !strings.Contains(string(b), wantJSON) {
				t.Errorf("JSON %s\nwant %s", b, wantJSON)
			}
		})
	}
}

func TestDaemonText(t *testing.T) {
	since := t0.Add(-90 * time.Second)
	for _, tc := range []struct {
		d    Daemon
		want string
	}{
		{Daemon{Serving: true, PID: 7, Since: &since}, "PID 7 up 1m30s"},
		{Daemon{Serving: true, PID: 7}, "PID 7"},
		{Daemon{Serving: true, Since: &since}, "daemon up 1m30s"},
		{Daemon{Serving: true}, "daemon unverified"},
		{Daemon{PID: 7, Since: &since}, "NO DAEMON"},
	} {
		if got := daemonText(tc.d, t0); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestThrottledWatch: status --watch of a flush under BW 20 MiB/s whose
// copy began 1.5 s before the watch, the daemon committing 40 MiB every 2
// s, read every second and 5 ms after each commit (inotify): the rate of
// the file and of the total never reads above 1.1 × BW (the first commit
// read 5 ms after the reading before it once read as several times BW) and the
// time left never goes up by more than 2 %.
func TestThrottledWatch(t *testing.T) {
	const bw, mib = 20 << 20, 1 << 20
	const size = 200 << 20
	commitAt := func(k int) float64 { return -1.5 + 2*float64(k) + 0.02 } // k-th commit, with its fsync
	var times []float64
	for s := 0.0; s < commitAt(5); s++ {
		times = append(times, s)
	}
	for k := 1; k <= 5; k++ {
		times = append(times, commitAt(k)+0.005)
	}
	sort.Float64s(times)
	m := NewMeter()
	var lastETA *float64
	for _, s := range times {
		var written int64
		for k := 1; k <= 5 && commitAt(k) <= s; k++ {
			written = int64(k) * 40 << 20
		}
		tr := hashfile.New()
		transfer.SetCommand(tr, transfer.Run)
		transfer.SetState(tr, transfer.Running)
		transfer.SetBW(tr, bw)
		transfer.AddFile(tr, "/c/a", "/p/a", size)
		transfer.SetWritten(tr, transfer.File{Src: "/c/a", Dest: "/p/a", Size: size}, written)
		r := Build("/t", t0.Add(time.Duration(s*float64(time.Second))), tr, m)
		for _, rt := range []*float64{r.Totals.Rate, r.Files[0].Rate} {
			if rt != nil && *rt > 1.1*bw {
				t.Fatalf("at %.3fs, %d MiB written: rate %.1f MiB/s under BW 20 MiB/s", s, written/mib, *rt/mib)
			}
		}
		if e := r.Totals.ETA; e != nil {
			if lastETA != nil && *e > *lastETA*1.02 {
				t.Fatalf("at %.3fs: ETA %.2fs, up from %.2fs", s, *e, *lastETA)
			}
			lastETA = e
		}
	}
	if lastETA == nil {
		t.Fatal("no time left was ever shown")
	}
}
