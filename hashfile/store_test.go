package hashfile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestStoreEmptyAndMissing(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(filepath.Join(dir, "transfer.scrinfo"), Flock)
	if _, err := s.Read(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading a missing file: %v", err)
	}
	if err := os.WriteFile(s.Path(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tree, err := s.Read()
	if err != nil || tree.Len() != 0 {
		t.Fatalf("empty file: %v, %d keys", err, tree.Len())
	}
}

func TestStoreUpdate(t *testing.T) {
	for _, locking := range []Locking{Flock, Fcntl} {
		t.Run(locking.String(), func(t *testing.T) {
			s := NewStore(filepath.Join(t.TempDir(), "transfer.scrinfo"), locking)
			_, wrote, err := s.Update(func(tr *Tree) error {
				tr.SetValue("STATE", "STOPPED")
				return nil
			})
			if err != nil || !wrote {
				t.Fatalf("create: wrote=%v err=%v", wrote, err)
			}
			fi, err := os.Stat(s.Path())
			if err != nil {
				t.Fatal(err)
			}
			umask := currentUmask()
			if want := fs.FileMode(0o666) &^ umask; fi.Mode().Perm() != want {
				t.Errorf("new file mode %v, want %v (umask %03o)", fi.Mode().Perm(), want, umask)
			}
			_, wrote, err = s.Update(func(tr *Tree) error {
				tr.SetValue("STATE", "STOPPED")
				return nil
			})
			if err != nil || wrote {
				t.Fatalf("unchanged update must not write: wrote=%v err=%v", wrote, err)
			}
			boom := errors.New("boom")
			if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue("STATE", "X"); return boom }); !errors.Is(err, boom) {
				t.Fatalf("fn error not returned: %v", err)
			}
			tr, err := s.Read()
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := tr.Value("STATE"); v != "STOPPED" {
				t.Fatalf("a failed update changed the file: STATE=%q", v)
			}
		})
	}
}

func TestStoreCorruptFileIsLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	img := Encode(sampleTree())
	img[len(img)-10] ^= 1
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(path, Flock)
	_, _, err := s.Update(func(tr *Tree) error { tr.SetValue("STATE", "RUNNING"); return nil })
	if err == nil || !errors.Is(err, ErrFormat) {
		t.Fatalf("update of a corrupt file: %v", err)
	}
	if want := path + ": CRC mismatch"; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("error %q should start with %q", err, want)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after, img) {
		t.Fatal("a corrupt file was rewritten")
	}
}

func currentUmask() fs.FileMode {
	p := filepath.Join(os.TempDir(), fmt.Sprintf("umask-probe-%d", os.Getpid()))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o777)
	if err != nil {
		return 0o022
	}
	fi, _ := f.Stat()
	f.Close()
	os.Remove(p)
	return 0o777 &^ fi.Mode().Perm()
}

// The two-process test re-executes the test binary as a child that
// increments a counter in the shared file; parent and child race on the
// same file and no increment may be lost.
const (
	childEnv     = "HASHFILE_TEST_CHILD"
	childPathEnv = "HASHFILE_TEST_PATH"
	childLockEnv = "HASHFILE_TEST_LOCK"
	childNEnv    = "HASHFILE_TEST_N"
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "1":
		os.Exit(runChild())
	case "fsize":
		os.Exit(runFsizeChild())
	case "hold":
		os.Exit(runHoldChild())
	}
	os.Exit(m.Run())
}

func runChild() int {
	locking, err := ParseLocking(os.Getenv(childLockEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv(childNEnv))
	if err := increment(NewStore(os.Getenv(childPathEnv), locking), "child", n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// increment adds 1 to COUNT n times, each in its own locked update, and also
// keeps a per-writer count so that a lost update is attributed.
func increment(s *Store, who string, n int) error {
	for range n {
		_, _, err := s.Update(func(tr *Tree) error {
			c, _, err := tr.Uint("COUNT")
			if err != nil {
				return err
			}
			tr.SetUint("COUNT", c+1)
			w, _, err := tr.Set("BY").Uint(who)
			if err != nil {
				return err
			}
			tr.Get("BY").SetUint(who, w+1)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func TestTwoProcessesNoLostUpdate(t *testing.T) {
	const n = 2000
	for _, locking := range []Locking{Flock, Fcntl} {
		t.Run(locking.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "transfer.scrinfo")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=1", childPathEnv+"="+path,
				childLockEnv+"="+locking.String(), childNEnv+"="+strconv.Itoa(n))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			s := NewStore(path, locking)
			parentErr := increment(s, "parent", n)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child: %v: %s", err, stderr.String())
			}
			if parentErr != nil {
				t.Fatal(parentErr)
			}
			tr, err := s.Read()
			if err != nil {
				t.Fatal(err)
			}
			c, _, _ := tr.Uint("COUNT")
			p, _, _ := tr.Get("BY").Uint("parent")
			ch, _, _ := tr.Get("BY").Uint("child")
			if c != 2*n || p != n || ch != n {
				t.Fatalf("COUNT=%d (parent %d, child %d), want %d: updates were lost", c, p, ch, 2*n)
			}
		})
	}
}

func TestStoreGuard(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "transfer.scrinfo")
	if err := os.WriteFile(path, Encode(sampleTree()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(path, Flock)
	refuse := errors.New("group or other may write it")
	s.Guard(func(st *unix.Stat_t) error {
		if st.Mode&0o022 != 0 {
			return refuse
		}
		return nil
	})
	if _, err := s.Read(); err != nil {
		t.Fatalf("a sound file was refused: %v", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if _, err := s.Read(); !errors.Is(err, refuse) {
		t.Fatalf("read of a refused file: %v", err)
	}
	if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue("STATE", "X"); return nil }); !errors.Is(err, refuse) {
		t.Fatalf("update of a refused file: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused file was written")
	}
	link := filepath.Join(dir, "link.scrinfo")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	ls := NewStore(link, Flock)
	ls.Guard(func(*unix.Stat_t) error { return nil })
	if _, err := ls.Read(); err == nil || !strings.Contains(err.Error(), "refusing a symbolic link") {
		t.Fatalf("guarded read through a symlink: %v", err)
	}
}

// growBy adds a key whose value makes the image longer by about n bytes.
func growBy(n int) func(*Tree) error {
	return func(tr *Tree) error {
		tr.SetValue("GROWTH", strings.Repeat("g", n))
		return nil
	}
}

// runFsizeChild lowers its own RLIMIT_FSIZE to just above the file's size
// and tries to grow it, printing the error.
func runFsizeChild() int {
	path := os.Getenv(childPathEnv)
	fi, err := os.Stat(path)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	lim := unix.Rlimit{Cur: uint64(fi.Size()) + 16, Max: unix.RLIM_INFINITY}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Println(err)
		return 2
	}
	s := NewStore(path, Flock)
	_, _, err = s.Update(growBy(3000))
	var we *WriteError
	switch {
	case err == nil:
		fmt.Println("grew beyond RLIMIT_FSIZE without an error")
		return 1
	case !errors.As(err, &we) || !errors.Is(err, unix.EFBIG):
		fmt.Println("want a WriteError wrapping EFBIG:", err)
		return 1
	case we.Rewrites != 0 || s.Rewrites() != 0:
		fmt.Printf("a failed update counted as a rewrite: WriteError.Rewrites %d, Rewrites %d, want 0 and 0\n", we.Rewrites, s.Rewrites())
		return 1
	}
	return 0
}

// TestStoreRewrites: Rewrites counts the updates that wrote a new image,
// not those that left the image as it was.
func TestStoreRewrites(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "transfer.scrinfo"), Flock)
	steps := []struct {
		fn   func(*Tree) error
		want uint64
	}{
		{growBy(10), 1},
		{growBy(10), 1}, // the same image: nothing written
		{growBy(20), 2},
		{func(tr *Tree) error { tr.Unset("GROWTH"); return nil }, 3},
	}
	for i, st := range steps {
		if _, _, err := s.Update(st.fn); err != nil {
			t.Fatal(err)
		}
		if got := s.Rewrites(); got != st.want {
			t.Fatalf("after update %d: Rewrites %d, want %d", i+1, got, st.want)
		}
	}
}

// TestStoreNoRoomKeepsOldImage: when the new image does not fit (the file
// size limit, a full file system), Update fails and the file still holds
// its old image, byte for byte; once there is room, Update succeeds.
func TestStoreNoRoomKeepsOldImage(t *testing.T) {
	t.Run("RLIMIT_FSIZE", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "transfer.scrinfo")
		old := Encode(sampleTree())
		if err := os.WriteFile(path, old, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=fsize", childPathEnv+"="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v: %s", err, out)
		}
		checkImage(t, path, old)
		if _, _, err := NewStore(path, Flock).Update(growBy(3000)); err != nil {
			t.Fatalf("without the limit: %v", err)
		}
	})
	t.Run("full tmpfs", func(t *testing.T) {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("mount tmpfs: %v", err)
			}
			t.Skipf("cannot mount a tmpfs here (%v)", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		path := filepath.Join(dir, "transfer.scrinfo")
		s := NewStore(path, Flock)
		// An image a little under one page, so that growth needs a page.
		if _, _, err := s.Update(func(tr *Tree) error {
			tr.SetValue("PAD", strings.Repeat("p", 3900))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		filler := fill(t, dir)
		_, _, err = s.Update(growBy(1000))
		var we *WriteError
		if !errors.As(err, &we) || !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("growing on a full file system: %v, want a WriteError wrapping ENOSPC", err)
		}
		checkImage(t, path, old)
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Update(growBy(1000)); err != nil {
			t.Fatalf("once there is room: %v", err)
		}
		if _, err := s.Read(); err != nil {
			t.Fatal(err)
		}
	})
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}

// checkImage fails unless the file holds exactly want and decodes.
func checkImage(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		_, derr := Decode(got)
		t.Fatalf("the old image was not kept: %d bytes now, %d before; decode: %v", len(got), len(want), derr)
	}
	if _, err := Decode(got); err != nil {
		t.Fatal(err)
	}
}

// runHoldChild takes the file's exclusive lock, says "locked" and keeps it
// until its standard input closes.
func runHoldChild() int {
	locking, err := ParseLocking(os.Getenv(childLockEnv))
	if err != nil {
		fmt.Println(err)
		return 2
	}
	f, err := os.OpenFile(os.Getenv(childPathEnv), os.O_RDWR, 0)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	if err := tryLock(f, locking, true, true); err != nil {
		fmt.Println(err)
		return 2
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// holdLock makes another process hold the file's exclusive lock until the
// returned function is called.
func holdLock(t *testing.T, path string, locking Locking) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=hold", childPathEnv+"="+path, childLockEnv+"="+locking.String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("lock holder: %q", line)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			stdin.Close()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(release)
	return release
}

// TestStoreLockWaitCancellable: while another process holds the lock, an
// access reports the wait and gives up when its context is cancelled; once
// the lock is free, the next access goes through.
func TestStoreLockWaitCancellable(t *testing.T) {
	for _, locking := range []Locking{Flock, Fcntl} {
		t.Run(locking.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "transfer.scrinfo")
			if err := os.WriteFile(path, Encode(sampleTree()), 0o600); err != nil {
				t.Fatal(err)
			}
			release := holdLock(t, path, locking)
			s := NewStore(path, locking)
			waits := make(chan time.Time, 4)
			s.OnLockWait(func(since time.Time) { waits <- since })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			began := time.Now()
			go func() {
				_, _, err := s.UpdateContext(ctx, growBy(10))
				done <- err
			}()
			select {
			case since := <-waits:
				if since.IsZero() || since.Before(began.Add(-time.Second)) {
					t.Fatalf("wait reported since %v", since)
				}
			case err := <-done:
				t.Fatalf("update went through a held lock: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("a long lock wait was never reported")
			}
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "held by another process since") {
					t.Fatalf("cancelled wait: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("a cancelled lock wait did not return")
			}
			if end := <-waits; !end.IsZero() {
				t.Fatalf("end of the wait reported as %v, want the zero time", end)
			}
			release()
			if _, wrote, err := s.UpdateContext(context.Background(), growBy(10)); err != nil || !wrote {
				t.Fatalf("after release: wrote %v, %v", wrote, err)
			}
		})
	}
}

// TestStoreSettle: with Settle, an access takes the lock only once the
// file has gone the settle time without a change the Store did not make.
func TestStoreSettle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	lib := NewStore(path, Fcntl)
	d := NewStore(path, Fcntl)
	const settle = 300 * time.Millisecond
	d.Settle(settle)
	for i := range 3 {
		if _, _, err := lib.Update(growBy(i + 1)); err != nil {
			t.Fatal(err)
		}
		_, _, err := d.UpdateContext(context.Background(), func(tr *Tree) error {
			var st unix.Stat_t
			if err := unix.Stat(path, &st); err != nil {
				return err
			}
			if age := time.Since(time.Unix(st.Ctim.Unix())); age < settle {
				t.Errorf("locked %v after a foreign change, want at least %v", age, settle)
			}
			tr.SetValue("DAEMON", strconv.Itoa(i))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestStoreReadsAfterAShrinkCutShort: a writer killed between writing a
// shorter image and cutting the file to it leaves the whole new image
// followed by the old image's last bytes. The Store reads the image the
// header declares (its CRC checked as always), and its next rewrite leaves
// the file exactly the new image; a declared image that is not whole is
// still an error.
func TestStoreReadsAfterAShrinkCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	tr := New()
	tr.SetValue("COMMAND", "RUN")
	tr.Set("FILES").Set("/cache/a").SetValue("SIZE", "1")
	img := Encode(tr)
	stale := append(append([]byte{}, img...), []byte("ERROR message that was longer")...)
	if err := os.WriteFile(path, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(path, Flock)
	got, err := s.Read()
	if err != nil {
		t.Fatalf("read after a shrink cut short: %v", err)
	}
	if !bytes.Equal(Encode(got), img) {
		t.Fatalf("read %q, want the declared image", Encode(got))
	}
	if _, wrote, err := s.Update(func(t *Tree) error { t.SetValue("STATE", "RUNNING"); return nil }); err != nil || !wrote {
		t.Fatalf("update: wrote %v, %v", wrote, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(raw); err != nil {
		t.Fatalf("after the rewrite the file is not exactly one image: %v", err)
	}
	// A declared image whose CRC does not match is not accepted.
	bad := append([]byte{}, stale...)
	bad[HeaderSize+6] ^= 0xff
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(path, Flock).Read(); err == nil {
		t.Fatal("a damaged image followed by a stale tail was accepted")
	}
}

// TestLockBackoff: a lock held elsewhere is retried every 200 µs for the
// first 5 ms, about as long as the library holds it for an update, then
// after waits that double from LockRetryMin up to LockRetryMax; while
// settling, from LockRetryMin at once.
func TestLockBackoff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{0, 200 * time.Microsecond},
		{24, 200 * time.Microsecond},
		{25, LockRetryMin},
		{26, 2 * LockRetryMin},
		{27, 4 * LockRetryMin},
		{30, 32 * LockRetryMin},
		{31, LockRetryMax},
		{100, LockRetryMax},
		{1 << 20, LockRetryMax},
	} {
		if got := lockBackoff(tc.n); got != tc.want {
			t.Errorf("lockBackoff(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	var quick time.Duration
	for n := 0; lockBackoff(n) < LockRetryMin; n++ {
		quick += lockBackoff(n)
	}
	if quick != 5*time.Millisecond {
		t.Errorf("quick retries span %v, want 5ms", quick)
	}
	// While settling, for SCR up to 1.2 with fcntl locking, whose library
	// fails outright on a busy lock, none of the quick retries.
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	plain, settling := NewStore(path, Flock), NewStore(path, Fcntl)
	settling.Settle(100 * time.Millisecond)
	if got := plain.backoff(0); got != 200*time.Microsecond {
		t.Errorf("first retry after %v, want 200µs", got)
	}
	for n, want := range []time.Duration{LockRetryMin, 2 * LockRetryMin, 4 * LockRetryMin} {
		if got := settling.backoff(n); got != want {
			t.Errorf("settling: retry %d after %v, want %v", n, got, want)
		}
	}
}
