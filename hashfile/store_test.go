package hashfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
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
