package daemon

import (
	"path/filepath"
	"testing"

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
	store := handOver(t, tf, src, filepath.Join(dir, "pfs", "never.ckpt"), 100)
	logs := runObserved(t, tf)
	copies := func(level zapcore.Level) []observer.LoggedEntry {
		return logs.FilterMessage("copy").FilterLevelExact(level).AllUntimed()
	}
	waitLogged(t, logs, "three retries", func() bool { return len(copies(zapcore.DebugLevel)) >= 3 })
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
	waitLogged(t, logs, "the line saying the daemon gave up", func() bool { return len(gaveUp()) > 0 })
	g := gaveUp()
	if len(g) != 1 || g[0].Level != zapcore.WarnLevel {
		t.Fatalf("gave-up lines: %v", g)
	}
	f := g[0].ContextMap()
	if f["src"] != src || f["failed_attempts"].(int64) < 3 || f["last_error"] == "" {
		t.Errorf("gave-up fields %v", f)
	}
}
