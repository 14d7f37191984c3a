package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
	"github.com/scr-transferd/scr-transferd/transfer"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
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
	add("/dev/shm/scr.1001/dataset.1/rank_1.ckpt", "/p/lustre/user1/sim/scr.dataset.1/rank_1.ckpt", 104857600, written)
	add("/dev/shm/scr.1001/dataset.1/rank_2.ckpt", "/p/lustre/user1/sim/scr.dataset.1/rank_2.ckpt", 524294, 0)
	transfer.SetError(tr, "/dev/shm/scr.1001/dataset.1/rank_2.ckpt", "open /p/lustre/user1/sim/scr.dataset.1/rank_2.ckpt: permission denied")
	add("/dev/shm/scr.1001/dataset.1/rank_3.ckpt", "/p/lustre/user1/sim/scr.dataset.1/rank_3.ckpt", 2048, 0)
	tr.Set(transfer.KeyFiles).Set("/dev/shm/scr.1001/dataset.1/broken").SetValue(transfer.KeySize, "12x")
	return tr
}

// snapshotReport is two readings five seconds apart, the second one shown.
func snapshotReport() statusReport {
	m := newRateMeter()
	buildReport("/dev/shm/scr.1001/transfer.scrinfo", t0, snapshotTree(10<<20), m)
	return buildReport("/dev/shm/scr.1001/transfer.scrinfo", t0.Add(5*time.Second), snapshotTree(40<<20), m)
}

func TestStatusGolden(t *testing.T) {
	r := snapshotReport()
	golden(t, "status.txt", []byte(renderText(r, view{})))
	golden(t, "status-80x12.txt", []byte(renderText(r, view{width: 80, height: 12})))
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "status.json", append(b, '\n'))
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
	// 30 MiB in 5 s.
	f := r.Files[1]
	if f.Rate == nil || *f.Rate != 6<<20 {
		t.Fatalf("rate of the file being copied: %v, want 6 MiB/s", f.Rate)
	}
	if f.ETA == nil || *f.ETA != 10 {
		t.Errorf("ETA %v, want 10 s (60 MiB left at 6 MiB/s)", f.ETA)
	}
	if r.Files[2].State != transfer.StateError || r.Files[4].State != transfer.StateInvalid || r.Files[0].CRC != "0x1a2b3c4d" {
		t.Errorf("file states: %+v", r.Files)
	}
	if r.Complete {
		t.Error("complete with files left")
	}
}

func TestRenderFitsTheTerminal(t *testing.T) {
	r := snapshotReport()
	for _, o := range []view{{width: 40, height: 8}, {width: 80, height: 12}, {width: 200, height: 50}} {
		out := renderText(r, o)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for _, l := range lines {
			if w := ansi.StringWidth(l); w >= o.width {
				t.Errorf("%dx%d: line of %d cells: %q", o.width, o.height, w, l)
			}
		}
		if len(lines) > o.height {
			t.Errorf("%dx%d: %d lines", o.width, o.height, len(lines))
		}
		if !strings.Contains(out, "ERROR: open") {
			t.Errorf("%dx%d: the file in error is not shown:\n%s", o.width, o.height, out)
		}
	}
}

func TestRateMeter(t *testing.T) {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name     string
		readings [][2]float64 // seconds, count
		want     float64      // -1: unknown
	}{
		{"one reading", [][2]float64{{0, 100}}, -1},
		{"steady", [][2]float64{{0, 0}, {1, 100}, {2, 200}}, 100},
		{"steps between fsyncs", [][2]float64{{0, 0}, {2, 400}, {3, 400}, {4, 800}, {5, 800}, {6, 1200}}, 200},
		{"a waiting file's wait is not counted", [][2]float64{{0, 0}, {5, 0}, {9, 0}, {10, 100}, {11, 200}}, 100},
		{"a stall counts", [][2]float64{{0, 0}, {1, 100}, {2, 100}, {3, 100}, {4, 100}}, 25},
		{"window forgets the old pace", [][2]float64{{0, 0}, {1, 1000}, {12, 1000}, {14, 1200}}, 100},
		{"reset starts afresh", [][2]float64{{0, 500}, {1, 900}, {2, 100}}, -1},
		{"same instant replaces", [][2]float64{{0, 0}, {2, 100}, {2, 200}}, 100},
	} {
		var h []sample
		var rate *float64
		for _, rd := range tc.readings {
			h, rate = observe(h, at(rd[0]), int64(rd[1]))
		}
		switch {
		case tc.want < 0 && rate != nil:
			t.Errorf("%s: rate %v, want unknown", tc.name, *rate)
		case tc.want >= 0 && (rate == nil || *rate != tc.want):
			t.Errorf("%s: rate %v, want %v", tc.name, rate, tc.want)
		}
	}
}

// TestStatusOfTheOriginalDaemonsFile reads a transfer file the original
// scr_transfer daemon left after a complete flush.
func TestStatusOfTheOriginalDaemonsFile(t *testing.T) {
	path := shareddata.File(t, "kvtree", "transfer_done_by_scr_transfer.scrinfo")
	ctx := context.Background()
	r := inproc(ctx, "status", "--json", path)
	wantCode(t, r, 0, "status --json")
	var rep statusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Complete || rep.State != "STOPPED" || rep.Totals.Files != 2 || rep.Totals.Pending != 0 || rep.BW != 52428800 {
		t.Errorf("status of a complete flush: %+v", rep)
	}
	r = inproc(ctx, "status", path)
	wantCode(t, r, 0, "status")
	wantIn(t, r.stdout, "flush complete (FLAG DONE)", "status text")
	r = inproc(ctx, "wait", "--timeout=5s", path)
	wantCode(t, r, 0, "wait on a complete flush")

	lib := shareddata.File(t, "kvtree", "transfer_library.scrinfo")
	r = inproc(ctx, "status", "--json", lib)
	wantCode(t, r, 0, "status of the library's file")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Complete || rep.Command != "RUN" || rep.Totals.Pending != 524294+124 {
		t.Errorf("status of the library's file: %+v", rep)
	}
}

// TestWatchRedrawsInPlace checks the terminal form of --watch: the second
// view moves the cursor back over the first and erases it.
func TestWatchRedrawsInPlace(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	store := hashfile.NewStore(tf, hashfile.Flock)
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		transfer.AddFile(tr, "/c/a", "/p/a", 100)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	e := &env{ctx: context.Background(), stdout: &out, now: time.Now}
	n := 0
	err := watchStatus(e, store, watchOpts{interval: 10 * time.Millisecond, poll: defaultPoll, view: view{width: 100, height: 30}, redraw: true,
		stop: func(statusReport) bool { n++; return n == 2 }})
	if err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(out.String(), "\r")
	if len(frames) != 2 {
		t.Fatalf("want two frames, got %q", out.String())
	}
	lines := strings.Count(frames[0], "\n")
	if !strings.HasPrefix(frames[1], ansi.CursorUp(lines)+ansi.EraseScreenBelow) {
		t.Fatalf("second frame does not start by moving up %d lines and erasing: %q", lines, frames[1])
	}
}
