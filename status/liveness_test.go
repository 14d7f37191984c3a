package status

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/transfer"
)

func TestProbe(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	if err := os.WriteFile(tf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	probe := func(state transfer.State) Liveness {
		t.Helper()
		lv, err := Probe(tf, transfer.View{State: state})
		if err != nil {
			t.Fatal(err)
		}
		return lv
	}
	// No lock file: the recorded STATE decides.
	for state, want := range map[transfer.State]bool{"": false, transfer.Exiting: false, transfer.Running: true, transfer.Stopped: true} {
		if got := probe(state); got.Serving != want || got.Reason == "" {
			t.Errorf("no lock file, STATE %q: %+v, want serving %v", state, got, want)
		}
	}
	// A held lock: served, whatever STATE says, unless EXITING.
	l, err := instance.Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	if got := probe(""); !got.Serving || got.PID != os.Getpid() {
		t.Errorf("lock held, no STATE: %+v", got)
	}
	if got := probe(transfer.Exiting); got.Serving {
		t.Errorf("lock held, STATE EXITING: %+v", got)
	}
	// Released: the lock file stays and says no daemon, even with a STATE
	// RUNNING left behind.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := probe(transfer.Running); got.Serving {
		t.Errorf("lock released, STATE RUNNING: %+v", got)
	}
	// A lock that cannot be probed (here a symbolic link, which the
	// instance lock refuses) leaves the decision to the reading.
	if err := os.Remove(instance.LockPath(tf)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent", instance.LockPath(tf)); err != nil {
		t.Fatal(err)
	}
	if got := probe(transfer.Running); !got.Serving || !strings.Contains(got.Reason, "cannot be probed") {
		t.Errorf("unprobeable lock, STATE RUNNING: %+v", got)
	}
	if got := probe(""); got.Serving {
		t.Errorf("unprobeable lock, no STATE: %+v", got)
	}
}
