package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

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

// TestWatchSurvivesTheFileDisappearing: SCR removes the transfer file at
// every SCR_Init and writes it again; status --watch says so and shows the
// new file when it comes back.
func TestWatchSurvivesTheFileDisappearing(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	store := hashfile.NewStore(tf, hashfile.Flock)
	write := func(src string) {
		t.Helper()
		if _, _, err := store.Update(func(tr *hashfile.Tree) error {
			transfer.AddFile(tr, src, "/p/a", 100)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	write("/c/first")
	out := &testenv.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &env{ctx: ctx, stdout: out, now: time.Now}
	res := make(chan error, 1)
	go func() {
		res <- watchStatus(e, store, watchOpts{interval: 20 * time.Millisecond, poll: 20 * time.Millisecond, onChange: true,
			stop: func(r statusReport) bool { return len(r.Files) == 1 && r.Files[0].Source == "/c/second" }})
	}()
	waitOut := func(what string) {
		t.Helper()
		if !testenv.Until(time.Minute, func() bool {
			if strings.Contains(out.String(), what) {
				return true
			}
			select {
			case err := <-res:
				t.Fatalf("watch ended (%v) before showing %q:\n%s", err, what, out.String())
			default:
			}
			return false
		}) {
			t.Fatalf("watch never showed %q:\n%s", what, out.String())
		}
	}
	waitOut("first → a")
	if err := os.Remove(tf); err != nil {
		t.Fatal(err)
	}
	waitOut("no transfer file since")
	write("/c/second")
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("watch: %v\n%s", err, out.String())
		}
	case <-ctx.Done():
		t.Fatalf("watch never showed the new file:\n%s", out.String())
	}
}

// TestStatusAfterSIGKILL: status says which daemon serves the file, and
// since when; once it is killed with SIGKILL (no chance to record STATE
// EXITING: the file still says RUNNING) it says no daemon serves it, in
// text and JSON, and no longer that a file is being retried.
func TestStatusAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	src := filepath.Join(dir, "cache", "big.ckpt")
	writeFile(t, src, 8<<20, 4)
	started := time.Now()
	d := startDaemon(t, tf)
	wantCode(t, ctl(t, "add", tf, src, filepath.Join(dir, "pfs", "big.ckpt")), 0, "add")
	wantCode(t, ctl(t, "set", tf, "bw", "256K"), 0, "set bw") // 32 s of work
	wantCode(t, ctl(t, "run", tf), 0, "run")
	testenv.WaitFor(t, "the copy to start", time.Minute, func() bool {
		v := readView(t, tf)
		return v.State == transfer.Running && len(v.Files) == 1 && v.Files[0].Written > 0
	})
	statusJSON := func() statusReport {
		t.Helper()
		r := ctl(t, "status", "--json", tf)
		wantCode(t, r, 0, "status --json")
		var rep statusReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		if rep.Daemon == nil {
			t.Fatalf("no daemon field:\n%s", r.stdout)
		}
		return rep
	}
	pid := d.Pid()
	rep := statusJSON()
	// Since the daemon took its lock: after it was started (to the file
	// system's timestamp granularity), before this reading.
	if !rep.Daemon.Serving || rep.Daemon.PID != pid || rep.Daemon.Since == nil ||
		rep.Daemon.Since.Before(started.Add(-time.Second)) || rep.Daemon.Since.After(time.Now()) {
		t.Fatalf("served by PID %d: %+v", pid, *rep.Daemon)
	}
	r := ctl(t, "status", tf)
	wantCode(t, r, 0, "status")
	first, _, _ := strings.Cut(r.stdout, "\n")
	wantIn(t, first, fmt.Sprintf("  RUNNING  PID %d up ", pid), "the summary line names the daemon")

	d.Signal(syscall.SIGKILL)
	<-d.Done() // reaped: its lock is released
	if v := readView(t, tf); v.State != transfer.Running {
		t.Fatalf("STATE %q after SIGKILL: the test needs a STATE RUNNING left behind", v.State)
	}
	rep = statusJSON()
	if rep.Daemon.Serving || rep.Daemon.Since != nil || !strings.Contains(rep.Daemon.Reason, "no daemon holds its lock") {
		t.Fatalf("after SIGKILL: %+v", *rep.Daemon)
	}
	r = ctl(t, "status", tf)
	wantCode(t, r, 0, "status")
	first, _, _ = strings.Cut(r.stdout, "\n")
	wantIn(t, first, "  RUNNING  NO DAEMON", "the summary line after SIGKILL")
	wantIn(t, r.stdout, "\n  no daemon serves this file: no daemon holds its lock", "status after SIGKILL")
	if strings.Contains(r.stdout, "retrying") || strings.Contains(r.stdout, fmt.Sprintf("PID %d", pid)) {
		t.Fatalf("status after SIGKILL shows the daemon at work:\n%s", r.stdout)
	}
}
