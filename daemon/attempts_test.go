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
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestRetriesLoggedAtDebugWithAnOutcome: a file that keeps failing logs
// one "copy" line at info level (its first attempt) and its retries at
// debug level, with their attempt number; when the library removes its
// entry, one warning says the daemon gave up on it, with the number of
// failed attempts and the last error.
func TestRetriesLoggedAtDebugWithAnOutcome(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "cache", "never.ckpt")
	tf := filepath.Join(dir, "ctl", "transfer.scrinfo")
	if err := os.MkdirAll(filepath.Dir(tf), 0o700); err != nil {
		t.Fatal(err)
	}
	store := hashfile.NewStore(tf, hashfile.Flock)
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		transfer.AddFile(tr, src, filepath.Join(dir, "pfs", "never.ckpt"), 100)
		transfer.SetCommand(tr, transfer.Run)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := Start(t.Context(), Config{Settings: Settings{TransferFile: tf, Locking: hashfile.Flock, RetryMin: 20 * time.Millisecond,
		RetryMax: 40 * time.Millisecond, Verify: VerifyOff}, Wiring: Wiring{Log: zap.New(core)}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	pollFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; log:\n%v", what, logs.AllUntimed())
			}
			time.Sleep(10 * time.Millisecond) // polling the log
		}
	}
	copies := func(level zapcore.Level) []observer.LoggedEntry {
		return logs.FilterMessage("copy").FilterLevelExact(level).AllUntimed()
	}
	pollFor("three retries", func() bool { return len(copies(zapcore.DebugLevel)) >= 3 })
	if info := copies(zapcore.InfoLevel); len(info) != 1 {
		t.Fatalf("%d copy lines at info level after %d retries; want 1 (the first attempt)", len(info), len(copies(zapcore.DebugLevel)))
	}
	if a := copies(zapcore.DebugLevel)[0].ContextMap()["attempt"]; a != int64(2) {
		t.Errorf("first retry logged as attempt %v; want 2", a)
	}
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		tr.Get(transfer.KeyFiles).Unset(src)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	gaveUp := func() []observer.LoggedEntry {
		return logs.FilterMessage("gave up: the library removed the FILES entry of a failing file").AllUntimed()
	}
	pollFor("the line saying the daemon gave up", func() bool { return len(gaveUp()) > 0 })
	g := gaveUp()
	if len(g) != 1 || g[0].Level != zapcore.WarnLevel {
		t.Fatalf("gave-up lines: %v", g)
	}
	f := g[0].ContextMap()
	if f["src"] != src || f["failed_attempts"].(int64) < 3 || f["last_error"] == "" {
		t.Errorf("gave-up fields %v", f)
	}
}
