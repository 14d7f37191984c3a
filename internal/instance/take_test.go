package instance

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTakeWaitsOutAProbe: a lock found taken (by a probe's shared lock,
// as Holder takes for a moment) is tried again after the waits of
// conflictBackoff until it is free, and then taken; one still taken at
// the deadline is reported held.
func TestTakeWaitsOutAProbe(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	path := LockPath(tf)
	probe, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := unix.Flock(int(probe.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	var waits []time.Duration
	sleep := func(d time.Duration) {
		waits = append(waits, d)
		if len(waits) == 3 { // the probe ends during the third wait
			if err := unix.Flock(int(probe.Fd()), unix.LOCK_UN); err != nil {
				t.Error(err)
			}
		}
	}
	f, err := take(path, time.Now().Add(time.Hour), sleep)
	if err != nil {
		t.Fatalf("lock not taken once the probe ended: %v", err)
	}
	defer f.Close()
	want := []time.Duration{conflictBackoff().Wait(0, 0), conflictBackoff().Wait(1, 0), conflictBackoff().Wait(2, 0)}
	if !slices.Equal(waits, want) || want[0] != 10*time.Millisecond || want[2] != want[0] {
		t.Errorf("waits %v, want %v (every 10ms)", waits, want)
	}

	// Held by another open file of the lock at the deadline: reported held,
	// without a wait.
	waits = nil
	if _, err := take(path, time.Now(), sleep); !errors.As(err, new(*HeldError)) {
		t.Errorf("a lock held at the deadline: %v, want a *HeldError", err)
	}
	if len(waits) != 0 {
		t.Errorf("waited %v after the deadline", waits)
	}
}
