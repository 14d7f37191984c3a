package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/status"
	"github.com/scr-transferd/scr-transferd/transfer"
)

func readView(t *testing.T, tf string) transfer.View {
	t.Helper()
	tree, err := hashfile.NewStore(tf, hashfile.Flock).Read()
	if err != nil {
		t.Fatal(err)
	}
	return transfer.Read(tree)
}

// TestControlDrivesTheDaemon plays a job script against a real daemon:
// add, set, run, stop, run, wait, exit.
func TestControlDrivesTheDaemon(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "ctl", "transfer.scrinfo")
	src1, src2 := filepath.Join(dir, "cache", "a.ckpt"), filepath.Join(dir, "cache", "b.ckpt")
	dst1, dst2 := filepath.Join(dir, "pfs", "a.ckpt"), filepath.Join(dir, "pfs", "b.ckpt")
	writeFile(t, src1, 3<<20, 1)
	writeFile(t, src2, 512<<10, 2)
	d := startDaemon(t, tf)

	wantCode(t, ctl(t, "add", tf, src1, dst1), 0, "add")
	wantCode(t, ctl(t, "add", tf, src2, dst2), 0, "add")
	wantCode(t, ctl(t, "set", tf, "bw", "1M"), 0, "set bw")
	v := readView(t, tf)
	if len(v.Files) != 2 || v.Files[0].Size != 3<<20 || v.Files[0].Dest != dst1 || v.BW != 1<<20 {
		t.Fatalf("after add and set: %+v", v)
	}

	// run --wait returns once the daemon says RUNNING (1 MiB/s: 3 s of work).
	r := ctl(t, "run", "--wait", "--grace=1m", "--timeout=20s", tf)
	wantCode(t, r, 0, "run --wait")
	wantIn(t, r.stdout, "STATE RUNNING", "run --wait")
	if st := readView(t, tf).State; st != transfer.Running && !readView(t, tf).Done {
		t.Fatalf("run --wait returned with STATE %q", st)
	}

	r = ctl(t, "stop", "--wait", "--grace=1m", "--timeout=20s", tf)
	wantCode(t, r, 0, "stop --wait")
	wantIn(t, r.stdout, "STATE STOPPED", "stop --wait")
	v = readView(t, tf)
	if v.State != transfer.Stopped || v.Command != transfer.Stop || v.Done {
		t.Fatalf("after stop --wait: STATE %q COMMAND %q DONE %v", v.State, v.Command, v.Done)
	}

	wantCode(t, ctl(t, "set", tf, "bw", "0"), 0, "set bw 0")
	wantCode(t, ctl(t, "run", tf), 0, "run")
	r = ctl(t, "wait", tf, "--grace=1m", "--timeout", "60s") // flags after the file work too
	wantCode(t, r, 0, "wait")
	wantIn(t, r.stdout, "flush complete: 2 files, 3.50 MiB in all; this flush wrote ", "wait")
	wantIn(t, r.stdout, "; waited ", "wait: how long it waited")
	sameFile(t, src1, dst1)
	sameFile(t, src2, dst2)

	r = ctl(t, "exit", "--wait", "--grace=1m", "--timeout=20s", tf)
	wantCode(t, r, 0, "exit --wait")
	wantIn(t, r.stdout, "STATE EXITING", "exit --wait")
	wantExit(t, d, 20*time.Second)
}

// TestRunWaitAcceptsDone: RUN on a flush with nothing left to copy is
// answered with FLAG DONE, not RUNNING.
func TestRunWaitAcceptsDone(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	startDaemon(t, tf)
	r := ctl(t, "run", "--wait", "--grace=1m", "--timeout=20s", tf)
	wantCode(t, r, 0, "run --wait")
	wantIn(t, r.stdout, "FLAG DONE", "run --wait with nothing to copy")
}

func TestWaitNamesTheFileInError(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	missing := filepath.Join(dir, "cache", "gone.ckpt")
	startDaemon(t, tf)
	wantCode(t, ctl(t, "add", "--size=4096", tf, missing, filepath.Join(dir, "pfs", "gone.ckpt")), 0, "add --size")
	wantCode(t, ctl(t, "run", tf), 0, "run")
	r := ctl(t, "wait", "--fail-on-error", "--grace=1m", "--timeout=30s", tf)
	wantCode(t, r, 1, "wait on a file in error")
	wantIn(t, r.stderr, missing, "wait names the file")
	wantIn(t, r.stderr, "ERROR", "wait gives the error")
	if strings.Contains(r.stderr, "timed out") {
		t.Fatalf("wait timed out instead of reporting the error:\n%s", r.stderr)
	}
}

func TestWaitingWithoutADaemonTimesOut(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	src := filepath.Join(dir, "a")
	writeFile(t, src, 100, 1)
	wantCode(t, ctl(t, "add", tf, src, filepath.Join(dir, "b")), 0, "add")

	r := ctl(t, "wait", "--timeout=300ms", tf)
	wantCode(t, r, 1, "wait without a daemon")
	wantIn(t, r.stderr, "timed out after 300ms", "wait timeout")
	wantIn(t, r.stderr, "0 of 1 file complete", "wait timeout says how far")

	// A STATE left by an earlier daemon does not count: --wait removes it.
	if _, _, err := hashfile.NewStore(tf, hashfile.Flock).Update(func(tr *hashfile.Tree) error {
		transfer.SetState(tr, transfer.Running)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "run", "--wait", "--timeout=300ms", tf)
	wantCode(t, r, 1, "run --wait without a daemon")
	wantIn(t, r.stderr, "no daemon has answered", "run --wait timeout")

	r = ctl(t, "wait", "--timeout=1s", filepath.Join(dir, "nothing.scrinfo"))
	wantCode(t, r, 1, "wait on a missing file")
	wantIn(t, r.stderr, "nothing.scrinfo: no such transfer file", "wait on a missing file")
}

// TestStatusWatchFollowsAFlush reads status --watch --json while a real
// daemon flushes, until a reading says complete.
func TestStatusWatchFollowsAFlush(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	src := filepath.Join(dir, "cache", "a.ckpt")
	writeFile(t, src, 4<<20, 3)
	startDaemon(t, tf)
	wantCode(t, ctl(t, "add", tf, src, filepath.Join(dir, "pfs", "a.ckpt")), 0, "add")
	wantCode(t, ctl(t, "set", tf, "bw", "2MiB"), 0, "set")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBin, "status", "--watch", "--json", "--interval=100ms", tf)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, ctl(t, "run", tf), 0, "run")
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var lastWritten int64
	rated, complete := false, false
	for !complete && sc.Scan() {
		var r statusReport
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON line: %v: %s", err, sc.Bytes())
		}
		if r.Schema != status.Schema || len(r.Files) != 1 {
			t.Fatalf("reading: %s", sc.Bytes())
		}
		if r.Totals.Written < lastWritten {
			t.Fatalf("written went down: %d after %d", r.Totals.Written, lastWritten)
		}
		lastWritten = r.Totals.Written
		if r.Totals.Rate != nil && *r.Totals.Rate > 0 && r.Totals.ETA != nil {
			rated = true
		}
		complete = r.Complete
	}
	if !complete {
		t.Fatalf("status --watch ended without a complete reading: %v", sc.Err())
	}
	if !rated {
		t.Error("no reading had a rate and an ETA")
	}
	// Interrupted, it ends normally.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch after SIGINT: %v", err)
	}
}
