package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// bgCtl is a scr-ctl process running in the background, its standard
// output and error kept apart.
type bgCtl struct {
	*testenv.Process
	out, errb *testenv.SyncBuffer
}

// startCtl starts scr-ctl with args; it is killed at the end of the test.
func startCtl(t *testing.T, args ...string) *bgCtl {
	t.Helper()
	b := &bgCtl{out: &testenv.SyncBuffer{}, errb: &testenv.SyncBuffer{}}
	cmd := exec.Command(ctlBin, args...)
	cmd.Stdout, cmd.Stderr = b.out, b.errb
	b.Process = testenv.Start(t, cmd)
	return b
}

// result waits for the process (failing after within) and returns what it
// printed.
func (b *bgCtl) result(t *testing.T, within time.Duration) result {
	t.Helper()
	select {
	case <-b.Done():
	case <-time.After(within):
		t.Fatalf("scr-ctl %v still running after %v\nstderr:\n%s", b.Cmd.Args[1:], within, b.errb.String())
	}
	return result{b.out.String(), b.errb.String(), b.Cmd.ProcessState.ExitCode()}
}

// TestWaitThroughATransientError: a source that appears after the daemon
// recorded an ERROR for it is copied on a retry; wait reports the ERROR
// once and returns 0 when the flush completes.
func TestWaitThroughATransientError(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	late := filepath.Join(dir, "cache", "late.ckpt")
	startDaemon(t, tf)
	wantCode(t, ctl(t, "add", "--size=65536", tf, late, filepath.Join(dir, "pfs", "late.ckpt")), 0, "add --size")
	wantCode(t, ctl(t, "run", tf), 0, "run")
	w := startCtl(t, "wait", "--grace=1m", "--timeout=2m", tf)
	testenv.WaitFor(t, "the ERROR of the missing source", time.Minute, func() bool {
		v := readView(t, tf)
		return len(v.Files) == 1 && v.Files[0].State() == transfer.StateError
	})
	testenv.WaitFor(t, "wait to report the ERROR", time.Minute, func() bool {
		return strings.Contains(w.errb.String(), "still waiting") || !w.Alive()
	})
	if !w.Alive() {
		t.Fatalf("wait ended on a file the daemon retries: %s", w.result(t, time.Second))
	}
	writeFile(t, late, 65536, 9)
	r := w.result(t, time.Minute)
	wantCode(t, r, 0, "wait through a transient error")
	wantIn(t, r.stdout, "flush complete: 1 file, 64.0 KiB in all", "wait summary")
	wantIn(t, r.stdout, "; this flush wrote 64.0 KiB in ", "wait summary")
	wantIn(t, r.stderr, late, "wait reports the file in error")
	// Reported once per change, not once per retry.
	var prev string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if l == prev {
			t.Fatalf("the same report twice in a row:\n%s", r.stderr)
		}
		prev = l
	}
	sameFile(t, late, filepath.Join(dir, "pfs", "late.ckpt"))
}

// TestWaitFailOnError: with --fail-on-error the first ERROR ends the wait.
func TestWaitFailOnError(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	missing := filepath.Join(dir, "cache", "gone.ckpt")
	startDaemon(t, tf)
	wantCode(t, ctl(t, "add", "--size=4096", tf, missing, filepath.Join(dir, "pfs", "gone.ckpt")), 0, "add --size")
	wantCode(t, ctl(t, "run", tf), 0, "run")
	r := ctl(t, "wait", "--fail-on-error", "--grace=1m", "--timeout=1m", tf)
	wantCode(t, r, 1, "wait --fail-on-error")
	wantIn(t, r.stderr, missing+" -> ", "wait names the file")
	wantIn(t, r.stderr, "--fail-on-error", "wait says why it stopped")
}

// TestWaitWhenTheDaemonDies: a daemon killed mid-flush leaves the file
// unserved; wait says so within its grace, long before its timeout.
func TestWaitWhenTheDaemonDies(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	src := filepath.Join(dir, "cache", "big.ckpt")
	writeFile(t, src, 8<<20, 4)
	d := startDaemon(t, tf)
	wantCode(t, ctl(t, "add", tf, src, filepath.Join(dir, "pfs", "big.ckpt")), 0, "add")
	wantCode(t, ctl(t, "set", tf, "bw", "256K"), 0, "set bw") // 32 s of work
	wantCode(t, ctl(t, "run", tf), 0, "run")
	testenv.WaitFor(t, "the copy to start", time.Minute, func() bool {
		v := readView(t, tf)
		return v.State == transfer.Running && len(v.Files) == 1 && v.Files[0].Written > 0
	})
	// Started once the daemon is surely up, so that a short grace cannot
	// mistake a daemon still starting on a loaded machine for none.
	w := startCtl(t, "wait", "--grace=1s", "--timeout=2m", tf)
	d.Signal(syscall.SIGKILL)
	r := w.result(t, time.Minute)
	wantCode(t, r, 1, "wait after the daemon died")
	wantIn(t, r.stderr, "no daemon serves "+tf, "wait says why")
	wantIn(t, r.stderr, "0 of 1 file complete", "wait says how far the flush got")
	if strings.Contains(r.stderr, "timed out") {
		t.Fatalf("wait ran into its timeout:\n%s", r.stderr)
	}
}

// TestWaitWithoutADaemon: no daemon ever served the file; and one that
// served it and exited. Either way wait fails after its grace.
func TestWaitWithoutADaemon(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	src := filepath.Join(dir, "a")
	writeFile(t, src, 100, 1)
	wantCode(t, ctl(t, "add", tf, src, filepath.Join(dir, "b")), 0, "add")
	wantCode(t, ctl(t, "run", tf), 0, "run")

	r := ctl(t, "wait", "--grace=500ms", "--timeout=2m", tf)
	wantCode(t, r, 1, "wait with no daemon")
	wantIn(t, r.stderr, "no daemon serves "+tf, "wait with no daemon")
	wantIn(t, r.stderr, "is scr-transferd running on this file?", "wait with no daemon")

	// A daemon that served the file and was told to exit left its lock
	// file behind, unheld.
	d := startDaemon(t, tf)
	wantCode(t, ctl(t, "stop", "--wait", "--grace=1m", "--timeout=1m", tf), 0, "stop --wait")
	src2 := filepath.Join(dir, "c")
	writeFile(t, src2, 100, 2)
	wantCode(t, ctl(t, "exit", "--wait", "--grace=1m", "--timeout=1m", tf), 0, "exit --wait")
	if _, held, err := instance.Holder(tf); err != nil || held {
		t.Fatalf("exit --wait returned with the daemon's lock still held (%v)", err)
	}
	wantExit(t, d, time.Minute)
	if _, _, err := hashfile.NewStore(tf, hashfile.Flock).Update(func(tr *hashfile.Tree) error {
		transfer.AddFile(tr, src2, filepath.Join(dir, "d"), 100)
		transfer.SetCommand(tr, transfer.Run)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r = ctl(t, "wait", "--grace=500ms", "--timeout=2m", tf)
	wantCode(t, r, 1, "wait after the daemon exited")
	wantIn(t, r.stderr, "no daemon holds its lock", "wait after the daemon exited")

	r = ctl(t, "run", "--wait", "--grace=500ms", "--timeout=2m", tf)
	wantCode(t, r, 1, "run --wait with no daemon")
	wantIn(t, r.stderr, "no daemon serves "+tf, "run --wait with no daemon")
}

// TestControlNeedsAnExistingFile: run, stop and exit on a mistyped path
// fail and create nothing, unless --create.
func TestControlNeedsAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"run", "stop", "exit"} {
		tf := filepath.Join(dir, name+".scrinfo")
		r := inproc(context.Background(), name, tf)
		wantCode(t, r, exitFailure, name+" on a missing file")
		wantIn(t, r.stderr, tf+": no such transfer file", name+" on a missing file")
		wantIn(t, r.stderr, "--create", name+" hint")
		if _, err := os.Stat(tf); !os.IsNotExist(err) {
			t.Fatalf("%s created %s (%v)", name, tf, err)
		}
		wantCode(t, inproc(context.Background(), name, "--create", tf), exitOK, name+" --create")
		if v := readView(t, tf); string(v.Command) != strings.ToUpper(name) {
			t.Fatalf("%s --create: COMMAND %q", name, v.Command)
		}
	}
}

// TestRunWarnsWithoutADaemon: run, stop and exit without --wait record
// their command and exit 0, but say on stderr when no daemon serves the
// file: none ever started, or the one that did was killed. With a daemon
// serving it they say nothing.
func TestRunWarnsWithoutADaemon(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	src := filepath.Join(dir, "a")
	writeFile(t, src, 100, 1)
	wantCode(t, ctl(t, "add", tf, src, filepath.Join(dir, "b")), 0, "add")
	for _, name := range []string{"stop", "run"} {
		r := ctl(t, name, tf)
		wantCode(t, r, 0, name+" without a daemon")
		wantIn(t, r.stderr, "scr-ctl "+name+": warning: no daemon serves "+tf+", the command waits for one started on it: ", name+" without a daemon")
		if v := readView(t, tf); string(v.Command) != strings.ToUpper(name) {
			t.Fatalf("%s without a daemon: COMMAND %q not recorded", name, v.Command)
		}
	}

	d := startDaemon(t, tf)
	r := ctl(t, "stop", tf)
	wantCode(t, r, 0, "stop with a daemon")
	if r.stderr != "" {
		t.Fatalf("stop with a daemon serving the file warns: %s", r)
	}
	d.Signal(syscall.SIGKILL)
	<-d.Done()
	r = ctl(t, "run", tf)
	wantCode(t, r, 0, "run after the daemon was killed")
	wantIn(t, r.stderr, "warning: no daemon serves "+tf+", the command waits for one started on it: no daemon holds its lock", "run after the daemon was killed")
}
