package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// The scr section sets the daemon beside SCR 1.2.2's own scr_transfer, the
// daemon it succeeds, built from the same source as the library
// (test/scrlib/build.sh: -scr-flock and -scr-fcntl, or SCR_LIB_FLOCK and
// SCR_LIB_FCNTL). The bench plays the library: its update that starts a
// flush and its test right after, with the build's lock (in the FCNTL build,
// a non-blocking F_SETLK, counted when it fails), and watches WRITTEN
// without taking the lock. Each contender flushes the same file: once at
// BW 50 MiB/s (RUN to first WRITTEN, RUN to complete, the rate against BW)
// and once without a limit (throughput).

// scrContender is one program serving the transfer file.
type scrContender struct {
	name    string
	locking hashfile.Locking
	start   func(transferFile, logPath string) (*exec.Cmd, error)
}

// scrResult is one flush of one contender.
type scrResult struct {
	firstWritten, complete time.Duration
	lockFailures           int
}

func (b *bench) scrPeer() error {
	if b.c.scrFlock == "" || b.c.scrFcntl == "" {
		fmt.Printf("## SCR 1.2.2's scr_transfer beside the daemon\n\nskipped: no SCR build (test/scrlib/build.sh; -scr-flock and -scr-fcntl, or SCR_LIB_FLOCK and SCR_LIB_FCNTL)\n\n")
		return nil
	}
	daemon := func(locking string) func(string, string) (*exec.Cmd, error) {
		return func(tf, log string) (*exec.Cmd, error) {
			return startLogged(log, filepath.Join(b.bin, "scr-transferd"), "--locking="+locking, tf)
		}
	}
	peer := func(prefix string) func(string, string) (*exec.Cmd, error) {
		return func(tf, log string) (*exec.Cmd, error) {
			return startLogged(log, filepath.Join(prefix, "bin", "scr_transfer"), tf)
		}
	}
	contenders := []scrContender{
		{"scr-transferd --locking=flock", hashfile.Flock, daemon("flock")},
		{"scr-transferd --locking=fcntl", hashfile.Fcntl, daemon("fcntl")},
		{"scr_transfer (FLOCK build, SCR_TRANSFER_SECS=1)", hashfile.Flock, peer(b.c.scrFlock)},
		{"scr_transfer (FCNTL build, SCR_TRANSFER_SECS=1)", hashfile.Fcntl, peer(b.c.scrFcntl)},
	}
	const limited, bw int64 = 32 << 20, 50 << 20
	srcs := []string{filepath.Join(b.cache, "scr-limited.ckpt"), filepath.Join(b.cache, "scr-unlimited.ckpt")}
	for k, sz := range []int64{limited, b.c.scrSize} {
		if err := makeFile(srcs[k], sz); err != nil {
			return err
		}
	}
	fmt.Printf("## SCR 1.2.2's scr_transfer beside the daemon\n\n")
	fmt.Printf("%d MiB at BW %d MiB/s, then %d MiB unlimited; median of %d runs each, interleaved; "+
		"the bench plays the library (its lock as built) and reads WRITTEN without a lock.\n\n",
		limited>>20, bw>>20, b.c.scrSize>>20, b.c.runs)
	fmt.Println("| serving the transfer file | RUN → first WRITTEN | RUN → complete (32 MiB, BW 50 MiB/s) | rate / BW | unlimited MB/s | library lock failures |")
	fmt.Println("|---|---|---|---|---|---|")
	res := make([][2][]scrResult, len(contenders))
	for range b.c.runs {
		for i, c := range contenders {
			for k, sz := range []int64{limited, b.c.scrSize} {
				lim := float64(bw)
				if k == 1 {
					lim = 0
				}
				r, err := b.scrFlush(c, srcs[k], sz, lim)
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				res[i][k] = append(res[i][k], r)
			}
		}
	}
	for i, c := range contenders {
		printSCRRow(c.name, res[i], limited, bw, b.c.scrSize)
	}
	fmt.Println()
	return nil
}

// printSCRRow prints a contender's row: the medians of its limited flushes
// (rs[0]) and its unlimited ones (rs[1]).
func printSCRRow(name string, rs [2][]scrResult, limited, bw, unlimited int64) {
	var first, done, fast []time.Duration
	fails := 0
	for _, r := range rs[0] {
		first, done, fails = append(first, r.firstWritten), append(done, r.complete), fails+r.lockFailures
	}
	for _, r := range rs[1] {
		fast, fails = append(fast, r.complete), fails+r.lockFailures
	}
	rate := float64(limited) / median(done).Seconds() / float64(bw)
	fmt.Printf("| %s | %.2f s | %.2f s | %.2f | %.0f | %d |\n", name, median(first).Seconds(), median(done).Seconds(),
		rate, mbps(unlimited, median(fast)), fails)
}

// startLogged starts name with args, its output in the file log, with the
// original daemon's poll period at 1 s.
func startLogged(log, name string, args ...string) (*exec.Cmd, error) {
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "SCR_TRANSFER_SECS=1")
	return cmd, cmd.Start()
}

// scrFlush runs one flush of size bytes of src by contender c on a fresh
// transfer file, and ends the contender.
func (b *bench) scrFlush(c scrContender, src string, size int64, bw float64) (scrResult, error) {
	dir, err := os.MkdirTemp(b.work, "scr-peer-")
	if err != nil {
		return scrResult{}, err
	}
	defer os.RemoveAll(dir)
	tf := filepath.Join(dir, "transfer.scrinfo")
	dest := filepath.Join(b.pfs, "scr.ckpt")
	_ = os.Remove(dest)
	cmd, err := c.start(tf, filepath.Join(b.work, "scr-peer.log"))
	if err != nil {
		return scrResult{}, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	if _, err := watchTransfer(tf, time.Minute, func(v transfer.View) bool { return v.State != "" }); err != nil {
		return scrResult{}, fmt.Errorf("no STATE recorded: %w", err)
	}
	// The STATE is seen without the lock, maybe before the contender has
	// let it go; the library (SCR_Init) sees it under its lock.
	if err := waitUnlocked(tf, c.locking); err != nil {
		return scrResult{}, err
	}
	var r scrResult
	start := time.Now()
	// The library's update that starts the flush, then its test at once.
	n, err := libraryAccess(tf, c.locking, func(t *hashfile.Tree) {
		transfer.AddFile(t, src, dest, size)
		if bw > 0 {
			transfer.SetBW(t, bw)
		}
		transfer.SetCommand(t, transfer.Run)
		t.Unset("FLAG")
	})
	r.lockFailures += n
	if err != nil {
		return r, err
	}
	n, err = libraryAccess(tf, c.locking, nil)
	r.lockFailures += n
	if err != nil {
		return r, err
	}
	at, err := watchTransfer(tf, 10*time.Minute, func(v transfer.View) bool { _, w := v.Totals(); return w > 0 })
	if err != nil {
		return r, fmt.Errorf("no WRITTEN: %w", err)
	}
	r.firstWritten = at.Sub(start)
	at, err = watchTransfer(tf, 10*time.Minute, func(v transfer.View) bool { s, w := v.Totals(); return s > 0 && w >= s })
	if err != nil {
		return r, fmt.Errorf("not complete: %w", err)
	}
	r.complete = at.Sub(start)
	return r, checkCopy(src, dest, size)
}

// waitUnlocked waits until no process holds a lock of the file (F_GETLK;
// flock needs no wait: the library's flock waits).
func waitUnlocked(path string, locking hashfile.Locking) error {
	if locking == hashfile.Flock {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
			return err
		}
		if lk.Type == unix.F_UNLCK {
			return nil
		}
	}
	return errors.New("the transfer file stayed locked for a minute")
}

// checkCopy compares the first size bytes of src with dest.
func checkCopy(src, dest string, size int64) error {
	a, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	d, err := os.ReadFile(dest)
	if err != nil {
		return err
	}
	if int64(len(d)) != size || string(a[:size]) != string(d) {
		return fmt.Errorf("%s is not the %d bytes of %s", dest, size, src)
	}
	return nil
}

// watchTransfer reads the transfer file without its lock every
// millisecond (an image caught half-written is read again) until cond
// holds, and returns when it first did.
func watchTransfer(path string, timeout time.Duration, cond func(transfer.View) bool) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if raw, err := os.ReadFile(path); err == nil {
			if t, err := hashfile.Decode(raw); err == nil {
				v := transfer.Read(t)
				for _, f := range v.Files {
					if f.Error != "" {
						return time.Time{}, fmt.Errorf("%s: %s", f.Src, f.Error)
					}
				}
				if cond(v) {
					return time.Now(), nil
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	return time.Time{}, errors.New("timed out")
}

// libraryAccess makes one access of the transfer file as SCR 1.2 does with
// the given locking, applying edit (nil: a read). In the FCNTL build the
// library's lock is a non-blocking F_SETLK: each failure is counted (the
// real library would hang) and the access tried again a millisecond later.
func libraryAccess(path string, locking hashfile.Locking, edit func(*hashfile.Tree)) (failures int, err error) {
	if locking == hashfile.Flock {
		s := hashfile.NewStore(path, hashfile.Flock)
		if edit == nil {
			_, err := s.Read()
			return 0, err
		}
		_, _, err := s.Update(func(t *hashfile.Tree) error { edit(t); return nil })
		return 0, err
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return failures, err
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
		if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk); err != nil {
			f.Close()
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
				return failures, err
			}
			failures++
			time.Sleep(time.Millisecond)
			continue
		}
		err = rewriteLocked(f, edit)
		f.Close()
		return failures, err
	}
}

// rewriteLocked reads the locked file f and, if edit is not nil, rewrites
// it in place with edit applied.
func rewriteLocked(f *os.File, edit func(*hashfile.Tree)) error {
	raw, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	t, err := hashfile.Decode(raw)
	if err != nil {
		return err
	}
	if edit == nil {
		return nil
	}
	edit(t)
	img := hashfile.Encode(t)
	if _, err := f.WriteAt(img, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(img)))
}
