package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// An SCR-1.2-like client: SCR up to 1.2 built with fcntl locking takes its
// lock with F_SETLK, without waiting, and fails on EAGAIN. This process
// does what the library does at a flush: a locked write, then at once a
// locked read, then the application computes for a while; it counts every
// lock attempt that fails. Between its write and its read it works for a
// few milliseconds, as the library does, which is when a daemon reacting
// to the write at once takes the lock.
//
// Both accesses are SCR 1.2.2's: scr_hash_lock_open_read (the write's
// first half) and scr_hash_read_with_lock (the read) both go through
// scr_open_with_lock, open(O_RDWR|O_CREAT) and scr_file_lock_write, an
// F_WRLCK: the library's read is an exclusive lock too, which a daemon's
// shared lock makes fail as surely as an exclusive one.
const (
	scr12Env      = "SCR_TEST_SCR12_CLIENT" // the transfer file
	scr12CycleEnv = "SCR_TEST_SCR12_CYCLES"
	scr12PauseEnv = "SCR_TEST_SCR12_PAUSE"
	scr12FilesEnv = "SCR_TEST_SCR12_FILES" // src|dest|size, newline-separated: one added every cycles/len cycles
)

type scr12Report struct {
	Cycles, WriteFailures, ReadFailures int
	MaxWritten                          int64 // most WRITTEN bytes the client saw in one read
	FirstFailure                        string
}

func init() {
	if path := os.Getenv(scr12Env); path != "" {
		rep, err := scr12Client(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "scr12 client:", err)
			os.Exit(1)
		}
		_ = json.NewEncoder(os.Stdout).Encode(rep)
		os.Exit(0)
	}
}

// setlk takes an fcntl lock without waiting; errBusyLock if it is held.
func setlk(f *os.File, typ int16) error {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart}
	err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return errBusyLock
	}
	return err
}

var errBusyLock = errors.New("failed to acquire file lock (errno=11)")

func scr12Client(path string) (*scr12Report, error) {
	cycles, err := strconv.Atoi(os.Getenv(scr12CycleEnv))
	if err != nil {
		return nil, err
	}
	pause, err := time.ParseDuration(os.Getenv(scr12PauseEnv))
	if err != nil {
		return nil, err
	}
	files := strings.Split(os.Getenv(scr12FilesEnv), "\n")
	every := max(cycles/len(files), 1)
	rep := &scr12Report{}
	fail := func(what string, i int) {
		if rep.FirstFailure == "" {
			rep.FirstFailure = fmt.Sprintf("%s at cycle %d", what, i)
		}
	}
	for i := range cycles {
		rep.Cycles++
		// The write: read, modify, rewrite in place, under F_WRLCK.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		switch err := setlk(f, unix.F_WRLCK); {
		case errors.Is(err, errBusyLock):
			rep.WriteFailures++
			fail("write lock", i)
		case err != nil:
			f.Close()
			return nil, err
		default:
			img, err := io.ReadAll(f)
			if err != nil {
				f.Close()
				return nil, err
			}
			tr, err := hashfile.Decode(img)
			if err != nil {
				f.Close()
				return nil, err
			}
			tr.SetValue("LIBSEQ", strconv.Itoa(i))
			if i%every == 0 && i/every < len(files) {
				p := strings.Split(files[i/every], "|")
				size, _ := strconv.ParseInt(p[2], 10, 64)
				transfer.AddFile(tr, p[0], p[1], size)
				transfer.SetCommand(tr, transfer.Run)
			}
			out := hashfile.Encode(tr)
			if _, err := f.WriteAt(out, 0); err != nil {
				f.Close()
				return nil, err
			}
			if err := f.Truncate(int64(len(out))); err != nil {
				f.Close()
				return nil, err
			}
		}
		f.Close()
		// Then the test of the flush: a read, under F_WRLCK as the
		// library takes it, after the library's own few milliseconds of
		// work in between.
		time.Sleep(time.Duration(i%6) * time.Millisecond) // the library's work, not a wait for a condition
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		switch err := setlk(f, unix.F_WRLCK); {
		case errors.Is(err, errBusyLock):
			rep.ReadFailures++
			fail("read lock", i)
		case err != nil:
			f.Close()
			return nil, err
		default:
			img, err := io.ReadAll(f)
			if err != nil {
				f.Close()
				return nil, err
			}
			tr, err := hashfile.Decode(img)
			if err != nil {
				f.Close()
				return nil, err
			}
			_, written := transfer.Read(tr).Totals()
			rep.MaxWritten = max(rep.MaxWritten, written)
		}
		f.Close()
		time.Sleep(pause) // the application computing between flushes
	}
	return rep, nil
}

// TestSCR12FcntlClient: with --locking=fcntl and the default settling the
// daemon must never be holding the lock when an SCR-1.2-like client makes
// its write-then-read accesses, while it flushes the files that client
// hands it.
func TestSCR12FcntlClient(t *testing.T) {
	testenv.Long(t, "600 lock cycles of an SCR 1.2 fcntl client during a throttled flush")
	scr12Run(t, envInt(t, "SCR_TEST_FCNTL_CYCLES", 600), 0)
}

// TestSCR12FcntlClientLoaded is TestSCR12FcntlClient on a loaded machine:
// two processes spin on the CPUs throughout, so that the daemon and the
// client are preempted at any moment, between the client's write and its
// read too.
func TestSCR12FcntlClientLoaded(t *testing.T) {
	testenv.Long(t, "300 lock cycles of an SCR 1.2 fcntl client beside two busy loops")
	scr12Run(t, envInt(t, "SCR_TEST_FCNTL_LOADED_CYCLES", 300), 2)
}

// busyEnv makes the test binary spin on a CPU until killed.
const busyEnv = "SCR_TEST_BUSY_LOOP"

// busySink keeps the busy loop's work from being optimised away.
var busySink atomic.Uint64

func init() {
	if os.Getenv(busyEnv) != "" {
		for n := uint64(0); ; n++ { // a CPU's worth of work until killed
			busySink.Store(n)
		}
	}
}

// busyLoops starts n processes spinning on the CPUs (the shell's
// while :; do :; done) until the test ends.
func busyLoops(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), busyEnv+"=1")
		testenv.Start(t, cmd)
	}
}

// scr12Run runs the SCR-1.2-like client for cycles cycles against a daemon
// in fcntl mode, with busy processes spinning meanwhile, and fails on any
// lock attempt of the client that fails.
func scr12Run(t *testing.T, cycles, busy int) {
	n := newNode(t)
	n.store = hashfile.NewStore(n.transfer, hashfile.Fcntl)
	srcs := map[string][]byte{}
	var lines []string
	for i := range 5 {
		name := fmt.Sprintf("f%d.ckpt", i)
		p, data := n.checkpoint(name, 2*mib)
		srcs[p] = data
		lines = append(lines, fmt.Sprintf("%s|%s|%d", p, n.dest(name), len(data)))
	}
	// The flush runs throughout the cycles: 10 MiB at 100 kB/s.
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 100e3)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--locking=fcntl", "--sync-interval=200ms")
	n.waitFor("STATE recorded", settle, func(v transfer.View) bool { return v.State != "" })
	busyLoops(t, busy)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), scr12Env+"="+n.transfer, scr12CycleEnv+"="+strconv.Itoa(cycles),
		scr12PauseEnv+"=100ms", scr12FilesEnv+"="+strings.Join(lines, "\n"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client: %v: %s", err, stderr.String())
	}
	var rep scr12Report
	must(t, json.Unmarshal(out, &rep))
	t.Logf("client: %+v", rep)
	if rep.Cycles != cycles {
		t.Fatalf("client ran %d cycles, want %d", rep.Cycles, cycles)
	}
	if rep.WriteFailures+rep.ReadFailures != 0 {
		t.Fatalf("%d write and %d read lock attempts failed (first: %s): SCR 1.2 would have hung",
			rep.WriteFailures, rep.ReadFailures, rep.FirstFailure)
	}
	if rep.MaxWritten == 0 {
		t.Fatal("the daemon recorded no progress during the client's cycles")
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, srcs)
}

// scr12Access makes one access of the transfer file as SCR 1.2 built with
// fcntl locking does (open O_RDWR|O_CREAT, F_SETLK F_WRLCK without
// waiting), applying edit and rewriting the file if edit is not nil; it
// fails the test if the lock is held.
func scr12Access(t *testing.T, path string, edit func(*hashfile.Tree)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	must(t, err)
	defer f.Close()
	if err := setlk(f, unix.F_WRLCK); err != nil {
		t.Fatalf("the library's lock: %v: SCR 1.2 would have hung", err)
	}
	img, err := io.ReadAll(f)
	must(t, err)
	tr, err := hashfile.Decode(img)
	must(t, err)
	if edit == nil {
		return
	}
	edit(tr)
	out := hashfile.Encode(tr)
	_, err = f.WriteAt(out, 0)
	must(t, err)
	must(t, f.Truncate(int64(len(out))))
}

// TestFcntlSIGTERMAfterTheLibrarysWrite: a SIGTERM at any moment after the
// library's write and read (a checkpoint's flush start and its test) is
// answered within a second, with STATE EXITING recorded and no ERROR
// logged. The settling used to make the shutdown wait for 50 settle times
// of quiet, beyond its bound: "ERROR exiting without recording STATE
// EXITING … context deadline exceeded".
func TestFcntlSIGTERMAfterTheLibrarysWrite(t *testing.T) {
	for _, after := range []time.Duration{0, 50 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		t.Run(after.String(), func(t *testing.T) {
			n := newNode(t)
			n.store = hashfile.NewStore(n.transfer, hashfile.Fcntl)
			d := n.startEnv(nil, "--locking=fcntl")
			n.waitFor("STATE STOPPED", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
			scr12Access(t, n.transfer, func(tr *hashfile.Tree) { transfer.SetBW(tr, 1e6) })
			scr12Access(t, n.transfer, nil)
			time.Sleep(after) // the moment of the signal, not a wait for a condition
			terminate(t, d, nil)
			if log := d.Log.String(); strings.Contains(log, "ERROR") {
				t.Fatalf("an ordinary SIGTERM logged an ERROR:\n%s", log)
			}
			if v := n.view(); v.State != transfer.Exiting {
				t.Fatalf("STATE %q after SIGTERM, want EXITING", v.State)
			}
		})
	}
}

// TestFcntlStarvedByTheLibrary: a library that rewrites the transfer file
// every 30 ms never leaves it the quiet settling waits for. The daemon
// still records its STATE within the settling bound, says so in its log
// and in STATUS=, sends READY=1, and says when the library is quiet again.
// It used to wait for as long as the library wrote: nothing recorded, no
// READY=1.
func TestFcntlStarvedByTheLibrary(t *testing.T) {
	n := newNode(t)
	n.store = hashfile.NewStore(n.transfer, hashfile.Fcntl)
	n.library(func(tr *hashfile.Tree) { tr.SetValue("LIBSEQ", "0") })
	ctx, stop := context.WithCancel(context.Background())
	writing := make(chan error, 1)
	go func() {
		for i := 1; ctx.Err() == nil; i++ {
			if _, _, err := n.store.Update(func(tr *hashfile.Tree) error {
				tr.SetValue("LIBSEQ", strconv.Itoa(i))
				return nil
			}); err != nil {
				writing <- err
				return
			}
			time.Sleep(30 * time.Millisecond) // the library's pace, not a wait for a condition
		}
		writing <- nil
	}()
	var once sync.Once
	stopWriting := func() {
		once.Do(func() {
			stop()
			must(t, <-writing)
		})
	}
	t.Cleanup(stopWriting)

	sock := filepath.Join(n.root, "notify.sock")
	notes := notifySocket(t, sock)
	d := n.startEnv([]string{"NOTIFY_SOCKET=" + sock}, "--locking=fcntl")
	awaitNote(t, notes, "READY=1", func(m string) bool { return m == "READY=1" })
	status := awaitNote(t, notes, "STATUS= saying the library leaves no quiet moment", func(m string) bool {
		return strings.Contains(m, "no quiet moment since")
	})
	t.Logf("%s", status)
	d.WaitLog("the library left the transfer file no quiet moment", settle)
	if v := n.view(); v.State != transfer.Stopped {
		t.Fatalf("STATE %q while the library writes every 30 ms, want STOPPED recorded", v.State)
	}
	stopWriting()
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) }) // a change to look at
	d.WaitLog("the library leaves the transfer file quiet moments again", settle)
	terminate(t, d, nil)
}
