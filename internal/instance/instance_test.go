package instance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary act as a second process holding the
// lock of the transfer file it names.
const helperEnv = "INSTANCE_TEST_HOLD"

func TestMain(m *testing.M) {
	if tf := os.Getenv(helperEnv); tf != "" {
		os.Exit(hold(tf))
	}
	os.Exit(m.Run())
}

// hold takes the lock, says so on stdout, and keeps it until stdin closes
// or the process is killed.
func hold(tf string) int {
	l, err := Acquire(tf)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	if err := l.Close(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

type holder struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
}

// startHolder runs a separate process that takes the lock of tf.
func startHolder(t *testing.T, tf string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+tf)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("holder process: %q %v", line, err)
	}
	return &holder{cmd: cmd, stdin: stdin}
}

func TestLockPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/dev/shm/u/transfer.scrinfo", "/dev/shm/u/.transfer.scrinfo.lock"},
		{"transfer.scrinfo", ".transfer.scrinfo.lock"},
		{"/a/b/x", "/a/b/.x.lock"},
	} {
		if got := LockPath(tc.in); got != tc.want {
			t.Errorf("LockPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if LockPath(tc.in) == tc.in {
			t.Errorf("LockPath(%q) is the transfer file itself", tc.in)
		}
	}
}

func TestSecondProcessRefused(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	if _, held, err := Holder(tf); err != nil || held {
		t.Fatalf("Holder before anyone locked: held %v, %v", held, err)
	}
	h := startHolder(t, tf)

	_, err := Acquire(tf)
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("Acquire while another process holds the lock: %v, want a *HeldError", err)
	}
	if he.PID != h.cmd.Process.Pid || he.Path != LockPath(tf) {
		t.Fatalf("HeldError %+v, want PID %d path %s", he, h.cmd.Process.Pid, LockPath(tf))
	}
	want := fmt.Sprintf("already served by PID %d (lock %s)", h.cmd.Process.Pid, LockPath(tf))
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	pid, held, err := Holder(tf)
	if err != nil || !held || pid != h.cmd.Process.Pid {
		t.Fatalf("Holder = %d %v %v, want %d true", pid, held, err, h.cmd.Process.Pid)
	}
	// The probe took nothing for long: the holder still holds, and after
	// it lets go normally the lock is free.
	if err := h.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder process: %v", err)
	}
	if _, held, err := Holder(tf); err != nil || held {
		t.Fatalf("Holder after release: held %v, %v", held, err)
	}
	l, err := Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pid, held, err = Holder(tf)
	if err != nil || !held || pid != os.Getpid() {
		t.Fatalf("Holder = %d %v %v, want our PID %d", pid, held, err, os.Getpid())
	}
}

func TestReleasedWhenHolderKilled(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	h := startHolder(t, tf)
	if _, err := Acquire(tf); err == nil {
		t.Fatal("lock taken while held")
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	l, err := Acquire(tf)
	if err != nil {
		t.Fatalf("lock of a killed holder not released: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSameProcessTwice(t *testing.T) {
	// Two opens in one process are two open file descriptions: flock
	// conflicts between them too, so a daemon cannot serve a file twice.
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	l, err := Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var he *HeldError
	if _, err := Acquire(tf); !errors.As(err, &he) || he.PID != os.Getpid() {
		t.Fatalf("second Acquire: %v", err)
	}
}

func TestLockFileReplaced(t *testing.T) {
	// Someone removes the lock file while it is held: a newcomer creates
	// a new one and gets it; the first holder's lock then guards nothing
	// visible, which Holder reports as the newcomer. Acquire itself never
	// keeps a lock on a file the path no longer names.
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	l, err := Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Remove(LockPath(tf)); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if ok, err := samePath(l2.f, LockPath(tf)); err != nil || !ok {
		t.Fatalf("the new lock is not the file at the path: %v %v", ok, err)
	}
}

func TestRefusesSymlinkAndDirectory(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), LockPath(tf)); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(tf); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Acquire through a symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the symlink's target was created")
	}
	tf2 := filepath.Join(dir, "t2")
	if err := os.Mkdir(LockPath(tf2), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(tf2); err == nil {
		t.Fatal("Acquire on a directory succeeded")
	}
}

func TestHeldErrorUnknownPID(t *testing.T) {
	e := &HeldError{Path: "/x/.t.lock"}
	if got := e.Error(); got != "already served by PID unknown (lock /x/.t.lock)" {
		t.Fatal(got)
	}
}

func TestFlockHolder(t *testing.T) {
	locks := "1: POSIX  ADVISORY  WRITE 300 fd:01:77 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 4242 00:2d:1234 0 EOF\n" +
		"2: -> FLOCK  ADVISORY  WRITE 5151 00:2d:1234 0 EOF\n" +
		"3: FLOCK  ADVISORY  READ 777 fd:01:99 0 EOF\n" +
		"garbage\n4: FLOCK\n"
	for _, tc := range []struct {
		name     string
		dev, ino uint64
		want     int
	}{
		{"held", unix.Mkdev(0, 0x2d), 1234, 4242},
		{"shared", unix.Mkdev(0xfd, 1), 99, 777},
		{"posix lock only", unix.Mkdev(0xfd, 1), 77, 0},
		{"other inode", unix.Mkdev(0, 0x2d), 123, 0},
		{"other device", unix.Mkdev(0, 0x2e), 1234, 0},
	} {
		if got := flockHolder([]byte(locks), tc.dev, tc.ino); got != tc.want {
			t.Errorf("%s: flockHolder = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func FuzzFlockHolder(f *testing.F) {
	f.Add([]byte("2: FLOCK  ADVISORY  WRITE 4242 00:2d:1234 0 EOF\n"), uint64(0x2d), uint64(1234))
	f.Fuzz(func(t *testing.T, b []byte, dev, ino uint64) {
		if pid := flockHolder(b, dev, ino); pid < 0 {
			t.Fatalf("negative PID %d", pid)
		}
	})
}

// TestHolderFromProcLocks: the PID written in the lock file may be a dead
// daemon's; the holder named is the one the kernel lists.
func TestHolderFromProcLocks(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	h := startHolder(t, tf)
	if err := os.WriteFile(LockPath(tf), []byte("999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var he *HeldError
	if _, err := Acquire(tf); !errors.As(err, &he) || he.PID != h.cmd.Process.Pid {
		t.Fatalf("Acquire: %v, want a HeldError naming PID %d", err, h.cmd.Process.Pid)
	}
	if pid, held, err := Holder(tf); err != nil || !held || pid != h.cmd.Process.Pid {
		t.Fatalf("Holder = %d %v %v, want PID %d", pid, held, err, h.cmd.Process.Pid)
	}
}

// TestCheckTakesTheLockAgain: the lock file, or its whole directory,
// removed under a holder: Check takes the lock again at the path, with the
// PID, so that a newcomer is refused; removed again and taken by a
// newcomer first, Check reports the lock lost to it.
func TestCheckTakesTheLockAgain(t *testing.T) {
	for _, removeDir := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "ctl")
		tf := filepath.Join(dir, "transfer.scrinfo")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		l, err := Acquire(tf)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := l.Check(); again || err != nil {
			t.Fatalf("Check of an intact lock: %v %v", again, err)
		}
		remove := func() {
			if removeDir {
				err = os.RemoveAll(dir)
			} else {
				err = os.Remove(LockPath(tf))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		remove()
		if again, err := l.Check(); !again || err != nil {
			t.Fatalf("Check after removal (directory %v): %v %v, want the lock taken again", removeDir, again, err)
		}
		if pid, held, err := Holder(tf); !held || pid != os.Getpid() || err != nil {
			t.Fatalf("after Check: Holder %d %v %v, want this process", pid, held, err)
		}
		remove()
		if err := os.MkdirAll(dir, 0o700); err != nil { // as a second daemon does
			t.Fatal(err)
		}
		h := startHolder(t, tf)
		_, err = l.Check()
		var lost *LostError
		var he *HeldError
		if !errors.As(err, &lost) || !errors.As(err, &he) || he.PID != h.cmd.Process.Pid {
			t.Fatalf("Check after a newcomer took the lock: %v, want a LostError naming PID %d", err, h.cmd.Process.Pid)
		}
		l.Close()
	}
}

// TestWatchNoticesRemovalAtOnce: with a periodic check far away, the
// removal of the lock file is noticed through inotify and the lock taken
// again.
func TestWatchNoticesRemovalAtOnce(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	l, err := Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	retaken := make(chan string, 1)
	lost := l.Watch(ctx, time.Hour, func(p string) { retaken <- p })
	// Watch adds its inotify watch once started: remove the file until
	// the removal is noticed, five times over, the later ones while it
	// waits on the new file (a periodic check is an hour away).
	deadline := time.Now().Add(20 * time.Second)
	for noticed := 0; noticed < 5; {
		_ = os.Remove(LockPath(tf))
		select {
		case p := <-retaken:
			if p == LockPath(tf) {
				noticed++
			}
		case err := <-lost:
			t.Fatalf("lock lost: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the removal of the lock file was never noticed")
		}
	}
	cancel()
	if _, ok := <-lost; ok {
		t.Fatal("Watch sent an error on cancel")
	}
}

// TestWatchNoticesDirectoryMovedAway: with a periodic check far away,
// the control directory renamed away, or a directory above it, is
// noticed through inotify and the lock taken again at the path.
func TestWatchNoticesDirectoryMovedAway(t *testing.T) {
	for _, moved := range []string{"ctl", "job"} {
		t.Run(moved, func(t *testing.T) {
			root := t.TempDir()
			tf := filepath.Join(root, "job", "ctl", "transfer.scrinfo")
			if err := os.MkdirAll(filepath.Dir(tf), 0o700); err != nil {
				t.Fatal(err)
			}
			l, err := Acquire(tf)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			retaken := make(chan string, 1)
			lost := l.Watch(ctx, time.Hour, func(p string) { retaken <- p })
			waitingForEvents(t)
			dir := filepath.Join(root, "job")
			if moved == "ctl" {
				dir = filepath.Dir(tf)
			}
			if err := os.Rename(dir, dir+".old"); err != nil {
				t.Fatal(err)
			}
			select {
			case p := <-retaken:
				if p != LockPath(tf) {
					t.Fatalf("retaken at %s, want %s", p, LockPath(tf))
				}
				if _, err := os.Stat(LockPath(tf)); err != nil {
					t.Fatalf("the lock file is not back at its path: %v", err)
				}
			case err := <-lost:
				t.Fatalf("lock lost: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("the move of the directory was never noticed")
			}
		})
	}
}

// waitingForEvents returns once a Watch waits for its notifications, so
// that what the test does next is seen by them, not by Watch's first
// check.
func waitingForEvents(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	buf := make([]byte, 1<<20)
	for !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*notifier).wait")) {
		if time.Now().After(deadline) {
			t.Fatal("Watch never waited for its notifications")
		}
		runtime.Gosched()
	}
}

// TestWatchEndsWithTheLock: Watch of a closed lock ends without an error
// and without waiting for its periodic check, so a daemon's run that
// returns leaves no watch behind.
func TestWatchEndsWithTheLock(t *testing.T) {
	l, err := Acquire(filepath.Join(t.TempDir(), "transfer.scrinfo"))
	if err != nil {
		t.Fatal(err)
	}
	lost := l.Watch(context.Background(), time.Hour, nil)
	waitingForEvents(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err, ok := <-lost:
		if ok {
			t.Fatalf("Watch of a closed lock sent %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Watch went on after the lock was closed")
	}
}

// TestForeignErrorIsPermission: a lock file of another user is a
// permission problem, which a restart cannot cure, however it was found.
func TestForeignErrorIsPermission(t *testing.T) {
	for _, e := range []*ForeignError{
		{Path: "/x/.t.lock", UID: 65534, Err: fmt.Errorf("owned by another user: %w", fs.ErrPermission)},
		{Path: "/x/.t.lock", UID: 65534, Err: unix.EACCES},
	} {
		if !errors.Is(e, fs.ErrPermission) || !strings.Contains(e.Error(), "belongs to uid 65534") {
			t.Errorf("%v: not a permission error naming the owner", e)
		}
	}
}
