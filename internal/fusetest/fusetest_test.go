package fusetest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

func TestBucketServesInArrivalOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const d = bucketDepth
	tests := []struct {
		name string
		at   []time.Duration // arrival of each write, after t0
		n    []int
		want []time.Duration // completion of each write, after t0
	}{
		// An idle target serves bucketDepth of the write ahead.
		{"one write", []time.Duration{0}, []int{100}, []time.Duration{time.Second - d}},
		{"queued behind another", []time.Duration{0, 0}, []int{100, 50}, []time.Duration{time.Second - d, 1500*time.Millisecond - d}},
		{"after an idle gap", []time.Duration{0, 3 * time.Second}, []int{100, 100}, []time.Duration{time.Second - d, 4*time.Second - d}},
		{"arriving mid-service", []time.Duration{0, 500 * time.Millisecond}, []int{100, 100}, []time.Duration{time.Second - d, 2*time.Second - d}},
		// A pause shorter than bucketDepth is absorbed: the second write
		// is served as if it had been queued.
		{"after a short pause", []time.Duration{0, time.Second - d/2}, []int{100, 100}, []time.Duration{time.Second - d, 2*time.Second - d}},
		// A pause longer than bucketDepth is not: the target idled.
		{"after a longer pause", []time.Duration{0, time.Second + d}, []int{100, 100}, []time.Duration{time.Second - d, 2 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBucket(100)
			for i := range tc.at {
				got := b.reserve(t0.Add(tc.at[i]), tc.n[i]).Sub(t0)
				if got != tc.want[i] {
					t.Errorf("write %d done at %v, want %v", i, got, tc.want[i])
				}
			}
		})
	}
}

func TestParseLockMode(t *testing.T) {
	for _, m := range []LockMode{KernelLocks, NodeLocalLocks, NoLocks} {
		got, err := ParseLockMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseLockMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseLockMode("cluster"); err == nil {
		t.Error("ParseLockMode(cluster): no error")
	}
}

// twoNodes mounts one backing directory twice with the given lock mode and
// returns the path of one file through each mount.
func twoNodes(t *testing.T, mode LockMode) (a, b string) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, dir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(backing, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range []string{"a", "b"} {
		mp := filepath.Join(dir, name)
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		s, err := Mount(backing, mp, Options{Locks: mode})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
		paths = append(paths, filepath.Join(mp, "f"))
	}
	return paths[0], paths[1]
}

// tryFlock opens path and tries a non-blocking exclusive flock, returning
// the error and closing nothing until the test ends.
func tryFlock(t *testing.T, path string) error {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

func TestLockModes(t *testing.T) {
	tests := []struct {
		mode      LockMode
		first     error // the first lock, through mount a
		sameNode  error // a second open through mount a
		otherNode error // an open through mount b
	}{
		{KernelLocks, nil, syscall.EWOULDBLOCK, syscall.EWOULDBLOCK},
		{NodeLocalLocks, nil, syscall.EWOULDBLOCK, nil},
		{NoLocks, syscall.ENOSYS, syscall.ENOSYS, syscall.ENOSYS},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			a, b := twoNodes(t, tc.mode)
			for _, step := range []struct {
				what string
				path string
				want error
			}{{"first lock", a, tc.first}, {"same node", a, tc.sameNode}, {"other node", b, tc.otherNode}} {
				if err := tryFlock(t, step.path); !errors.Is(err, step.want) && !(err == nil && step.want == nil) {
					t.Errorf("%s: flock = %v, want %v", step.what, err, step.want)
				}
			}
		})
	}
}

func TestBucketSlowsWrites(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mp := t.TempDir(), t.TempDir()
	b := NewBucket(1 << 20) // 1 MiB/s
	s, err := Mount(backing, mp, Options{Bucket: b})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The bucket's queue is the observable: after a write through the
	// mount, the target is booked until at least 256 KiB / 1 MiB/s after
	// the write began (less what an idle target serves ahead), and the
	// write returned no sooner.
	start := time.Now()
	if err := os.WriteFile(filepath.Join(mp, "f"), make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	b.mu.Lock()
	next := b.next
	b.mu.Unlock()
	if booked := next.Sub(start); booked < 250*time.Millisecond-bucketDepth {
		t.Errorf("a 256 KiB write booked the target for %v, want at least %v", booked, 250*time.Millisecond-bucketDepth)
	}
	if returned.Before(next) {
		t.Errorf("the write returned %v before the target served it", next.Sub(returned))
	}
	got, err := os.ReadFile(filepath.Join(backing, "f"))
	if err != nil || len(got) != 256<<10 {
		t.Fatalf("backing file: %d bytes, %v", len(got), err)
	}
}

func TestNoTmpfile(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mp := t.TempDir(), t.TempDir()
	s, err := Mount(backing, mp, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fd, err := unix.Open(mp, unix.O_RDWR|unix.O_TMPFILE, 0o600)
	if err == nil {
		unix.Close(fd)
		t.Fatal("O_TMPFILE opened a file that the mount could never name")
	}
	if !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("O_TMPFILE: %v, want EOPNOTSUPP", err)
	}
}

// TestStallHoldsFsyncUntilSet: an fsync through a mount with a Stall
// waits while the delay lasts, and returns once Set shortens it.
func TestStallHoldsFsyncUntilSet(t *testing.T) {
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mp := t.TempDir(), t.TempDir()
	stall := NewStall(time.Hour)
	s, err := Mount(backing, mp, Options{Stall: stall})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer stall.Set(0)
	f, err := os.Create(filepath.Join(mp, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	if !testenv.Until(10*time.Second, func() bool { now, _ := stall.Waiting(); return now == 1 }) {
		t.Fatal("no fsync waiting on the stall")
	}
	select {
	case err := <-synced:
		t.Fatalf("fsync returned (%v) while stalled for an hour", err)
	default:
	}
	stall.Set(0)
	if err := <-synced; err != nil {
		t.Fatalf("fsync after the stall ended: %v", err)
	}
	if now, all := stall.Waiting(); now != 0 || all != 1 {
		t.Errorf("Waiting() = %d, %d; want 0, 1", now, all)
	}
}
