package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// handleFile returns a transfer file in a fresh control directory, holding
// cmd ("" for none), and its store.
func handleFile(t *testing.T, cmd transfer.Command) (string, *hashfile.Store) {
	t.Helper()
	tf := filepath.Join(t.TempDir(), "ctl", "transfer.scrinfo")
	if err := os.MkdirAll(filepath.Dir(tf), 0o700); err != nil {
		t.Fatal(err)
	}
	store := hashfile.NewStore(tf, hashfile.Flock)
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		if cmd != "" {
			transfer.SetCommand(tr, cmd)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return tf, store
}

// recordedState is the STATE the transfer file holds.
func recordedState(t *testing.T, store *hashfile.Store) transfer.State {
	t.Helper()
	tr, err := store.Read()
	if err != nil {
		t.Fatal(err)
	}
	return transfer.Read(tr).State
}

// closed tells whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitDone waits for d to end after why, failing t if it has not within
// 30 s.
func waitDone(t *testing.T, d *Daemon, why string) {
	t.Helper()
	select {
	case <-d.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon still running 30 s after %s", why)
	}
}

// TestStartReadyClose: Start returns with Ready closed once the first
// STATE is recorded, Status shows it, and Close records EXITING as
// SIGTERM does, ending the daemon without an error.
func TestStartReadyClose(t *testing.T) {
	for _, tc := range []struct {
		cmd  transfer.Command
		want transfer.State
	}{
		{"", transfer.Stopped},
		{transfer.Stop, transfer.Stopped},
		{transfer.Run, transfer.Stopped}, // nothing to copy: DONE, STOPPED
	} {
		name := string(tc.cmd)
		if name == "" {
			name = "no COMMAND"
		}
		t.Run(name, func(t *testing.T) {
			tf, store := handleFile(t, tc.cmd)
			d, err := Start(t.Context(), Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock}})
			if err != nil {
				t.Fatal(err)
			}
			if !closed(d.Ready()) {
				t.Fatal("Start returned after a first pass that recorded STATE, but Ready is not closed")
			}
			if got := recordedState(t, store); got != tc.want {
				t.Errorf("STATE %q recorded at Ready; want %q", got, tc.want)
			}
			if got := d.Status().State; got != tc.want {
				t.Errorf("Status().State = %q; want %q", got, tc.want)
			}
			if closed(d.Done()) || d.Err() != nil {
				t.Fatalf("running daemon: Done closed %v, Err %v", closed(d.Done()), d.Err())
			}
			if err := d.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if !closed(d.Done()) {
				t.Error("Done not closed after Close returned")
			}
			if got := recordedState(t, store); got != transfer.Exiting {
				t.Errorf("STATE %q recorded after Close; want EXITING", got)
			}
			if got := d.Status().State; got != transfer.Exiting {
				t.Errorf("Status().State = %q after Close; want EXITING", got)
			}
		})
	}
}

// TestStartContextCancel: the end of Start's context stops the daemon as
// Close does; Err is nil.
func TestStartContextCancel(t *testing.T) {
	tf, store := handleFile(t, transfer.Stop)
	ctx, cancel := context.WithCancel(t.Context())
	d, err := Start(ctx, Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitDone(t, d, "its context ended")
	if d.Err() != nil {
		t.Errorf("Err = %v after the context ended; want nil", d.Err())
	}
	if got := recordedState(t, store); got != transfer.Exiting {
		t.Errorf("STATE %q recorded; want EXITING", got)
	}
}

// TestStartExitCommand: COMMAND EXIT ends the daemon: Done closes, Err nil.
func TestStartExitCommand(t *testing.T) {
	tf, store := handleFile(t, transfer.Stop)
	d, err := Start(t.Context(), Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		transfer.SetCommand(tr, transfer.Exit)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, d, "COMMAND EXIT")
	if d.Err() != nil {
		t.Errorf("Err = %v after COMMAND EXIT; want nil", d.Err())
	}
	if got := recordedState(t, store); got != transfer.Exiting {
		t.Errorf("STATE %q recorded; want EXITING", got)
	}
}

// TestStartInstanceHeld: a transfer file whose instance lock another
// holds is a start failure: Start returns the instance's HeldError and
// records nothing.
func TestStartInstanceHeld(t *testing.T) {
	tf, store := handleFile(t, transfer.Run)
	held, err := instance.Acquire(tf)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	d, err := Start(t.Context(), Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock}})
	var he *instance.HeldError
	if !errors.As(err, &he) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("Start with the instance lock held: %v; want an instance.HeldError", err)
	}
	if d != nil {
		t.Error("Start returned a handle with its error")
	}
	if got := recordedState(t, store); got != "" {
		t.Errorf("STATE %q recorded by a daemon that could not start", got)
	}
}

// TestStartReadyAfterRepair: a transfer file that cannot be decoded at
// the start does not keep Start from returning; Ready closes once a
// later pass records the first STATE, after the file is repaired.
func TestStartReadyAfterRepair(t *testing.T) {
	good, _ := handleFile(t, transfer.Stop)
	image, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tf, store := handleFile(t, "")
	if err := os.WriteFile(tf, []byte("not a kvtree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Start(t.Context(), Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock,
		RetryMin: 20 * time.Millisecond, RetryMax: 40 * time.Millisecond}})
	if err != nil {
		t.Fatalf("Start on an undecodable transfer file: %v; want the daemon running, waiting for a repair", err)
	}
	defer d.Close()
	if closed(d.Ready()) {
		t.Fatal("Ready closed although no STATE could be recorded")
	}
	// Replaced whole, as the library writes a new file: a daemon reading
	// between a truncation and a write would see an empty file.
	if err := os.WriteFile(tf+".new", image, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tf+".new", tf); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Ready():
	case <-d.Done():
		t.Fatalf("daemon ended before Ready: %v", d.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("Ready not closed 30 s after the transfer file was repaired")
	}
	if got := recordedState(t, store); got != transfer.Stopped {
		t.Errorf("STATE %q recorded at Ready; want STOPPED", got)
	}
}
