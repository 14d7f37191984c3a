package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// logTimeout bounds each wait for what an observed daemon logs or records.
const logTimeout = 30 * time.Second

// handOver creates tf's directory and hands src over for dest, of size
// bytes, with the command RUN, as the library does; it returns the store
// the test reads and edits the transfer file through.
func handOver(t *testing.T, tf, src, dest string, size int64) *hashfile.Store {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(tf), 0o700); err != nil {
		t.Fatal(err)
	}
	store := hashfile.NewStore(tf, hashfile.Flock)
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		transfer.AddFile(tr, src, dest, size)
		transfer.SetCommand(tr, transfer.Run)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return store
}

// runObserved runs the daemon on tf with retries 20–40 ms apart and
// returns its log, kept at debug level; the daemon is stopped, and its
// error reported, when the test ends.
func runObserved(t *testing.T, tf string) *observer.ObservedLogs {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := Start(t.Context(), Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock, RetryMin: 20 * time.Millisecond,
		RetryMax: 40 * time.Millisecond, Verify: VerifyOff}, Wiring: Wiring{Log: zap.New(core)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return logs
}

// waitLogged polls cond until it holds, failing after logTimeout with the
// daemon's log.
func waitLogged(t *testing.T, logs *observer.ObservedLogs, what string, cond func() bool) {
	t.Helper()
	if !testenv.Until(logTimeout, cond) {
		t.Fatalf("timed out waiting for %s; log:\n%v", what, logs.AllUntimed())
	}
}
