package test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// holdLockEnv makes the test binary a process that holds the transfer
// file's flock for 20 s, as a library stuck in a long update would.
const holdLockEnv = "SCR_TEST_HOLD_LOCK"

func init() {
	if path := os.Getenv(holdLockEnv); path != "" {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err == nil {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(20 * time.Second) // the holder's behaviour, not a wait for a condition
		os.Exit(0)
	}
}

// holdTransferLock starts a process holding the transfer file's lock for
// 20 s; the returned function ends it early.
func holdTransferLock(t *testing.T, path string) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdLockEnv+"="+path)
	p := testenv.Start(t, cmd)
	p.WaitLogAfter(0, settle, "locked")
	return func() {
		_ = p.Cmd.Process.Kill()
		<-p.Done()
	}
}

// notifySocket listens on a unixgram socket as systemd does for
// sd_notify and delivers each datagram.
func notifySocket(t *testing.T, path string) <-chan string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 1024)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			for _, m := range strings.Split(string(buf[:n]), "\n") {
				ch <- m
			}
		}
	}()
	return ch
}

// awaitNote waits for a notification matching ok.
func awaitNote(t *testing.T, notes <-chan string, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(settle)
	for {
		select {
		case m, open := <-notes:
			if !open {
				t.Fatalf("notify socket closed waiting for %s", what)
			}
			if ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within %v", what, settle)
		}
	}
}

// startEnv is node.start with extra environment variables.
func (n *node) startEnv(env []string, flags ...string) *testenv.Process {
	n.t.Helper()
	args := append([]string{"--retry-min=100ms", "--retry-max=500ms"}, flags...)
	args = append(args, n.transfer)
	cmd := exec.Command(bins.Path(n.t, testenv.Daemon), args...)
	// A binary built with -race sleeps a second at exit (the race
	// runtime's atexit_sleep_ms) unless told not to.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	return testenv.Start(n.t, cmd)
}

// TestLibraryHoldsTheLock: another process holds the transfer file's lock
// for 20 s while the daemon copies. STATUS= says the daemon waits for it,
// the watchdog stops pinging (the loop and the copy make no progress), and
// SIGTERM is answered within a second; once the lock is free again a new
// daemon finishes the flush.
func TestLibraryHoldsTheLock(t *testing.T) {
	testenv.Long(t, "holds the transfer file's lock for seconds")
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	const watchdog = time.Second
	notes := notifySocket(t, filepath.Join(n.root, "notify.sock"))
	d := n.startEnv([]string{
		"NOTIFY_SOCKET=" + filepath.Join(n.root, "notify.sock"),
		fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds()),
	}, "--sync-interval=100ms", "--reread=200ms")
	n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 })
	for range 2 {
		awaitNote(t, notes, "WATCHDOG=1 while healthy", func(m string) bool { return m == "WATCHDOG=1" })
	}

	release := holdTransferLock(t, n.transfer)
	status := awaitNote(t, notes, "STATUS= saying the daemon waits for the lock", func(m string) bool {
		return strings.Contains(m, "waiting for the transfer-file lock held since")
	})
	t.Logf("%s", status)
	// systemd restarts a service that sends no WATCHDOG=1 for WATCHDOG_USEC:
	// the pings must stop, leaving a gap of twice that while the lock is held.
	last := time.Now()
	deadline := time.Now().Add(settle)
	for gap := false; !gap; {
		select {
		case m := <-notes:
			if m == "WATCHDOG=1" {
				last = time.Now()
			}
		case <-time.After(10 * time.Millisecond):
		}
		gap = time.Since(last) >= 2*watchdog
		if !gap && time.Now().After(deadline) {
			t.Fatal("the watchdog kept pinging while the daemon was stuck on the lock")
		}
	}

	terminate(t, d, nil)
	if !strings.Contains(d.Log.String(), "exiting without recording STATE EXITING") {
		t.Fatalf("the log does not say EXITING could not be recorded:\n%s", d.Log.String())
	}
	release()

	v := n.view()
	durablePrefixOK(t, v.Files[0], data)
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	n.start()
	v = n.waitFor("DONE after the lock was released", settle, done)
	checkFlushed(t, v, map[string][]byte{src: data})
}

// TestStopWhileTheLibraryHoldsTheLock: SIGTERM arrives while the library
// holds the transfer file's lock, as it does for a moment at each of its
// updates, with bytes copied and fsynced since the last commit. The lock
// is free again once the daemon has begun to stop: it still records those
// bytes, within
// the second a signal is answered in. Without the grace its commits get
// after the copy is told to stop, a stop that met the lock held lost them
// (and, when the copy had just been published, the next copy found no
// partial copy and started again from 0).
func TestStopWhileTheLibraryHoldsTheLock(t *testing.T) {
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 8*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, slowBW)
		transfer.SetCommand(tr, transfer.Run)
	})
	notes := notifySocket(t, filepath.Join(n.root, "notify.sock"))
	d := n.startEnv([]string{"NOTIFY_SOCKET=" + filepath.Join(n.root, "notify.sock")}, "--sync-interval=100ms", "--reread=200ms")
	before := n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 }).Files[0].Written

	release := holdTransferLock(t, n.transfer)
	// The copy goes on and waits to commit what it made durable since.
	awaitNote(t, notes, "STATUS= saying the daemon waits for the lock", func(m string) bool {
		return strings.Contains(m, "waiting for the transfer-file lock held since")
	})
	// The library's update ends once the daemon has begun to stop.
	terminate(t, d, func() {
		d.WaitLog("signal received: stopping", settle)
		release()
	})
	f := n.view().Files[0]
	durablePrefixOK(t, f, data)
	t.Logf("WRITTEN %d before the lock was taken, %d after SIGTERM", before, f.Written)
	if f.Written <= before {
		t.Fatalf("WRITTEN %d after SIGTERM, %d before the lock was taken: the bytes made durable meanwhile were not recorded", f.Written, before)
	}
}

// terminate sends the daemon SIGTERM, runs meanwhile (if not nil) while
// it stops, and fails unless it exits 0 within the second a signal is
// answered in, whatever holds the lock.
func terminate(t *testing.T, d *testenv.Process, meanwhile func()) {
	t.Helper()
	sent := time.Now()
	d.Signal(syscall.SIGTERM)
	if meanwhile != nil {
		meanwhile()
	}
	code := d.Wait(settle)
	took := time.Since(sent)
	t.Logf("SIGTERM answered in %v", took)
	if code != 0 {
		t.Fatalf("exit code %d on SIGTERM", code)
	}
	if took > time.Second {
		t.Fatalf("SIGTERM answered after %v, want within 1 s", took)
	}
}
