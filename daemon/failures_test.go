package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestFailureLoggedOncePerChange: a source that keeps failing the same way
// is logged "copy failed" at error level once, its repeats at debug level;
// a changed error is logged at error level again; the copy that finally
// succeeds logs "recovered". The transfer file's ERROR follows the error.
func TestFailureLoggedOncePerChange(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "cache", "late.ckpt")
	dest := filepath.Join(dir, "pfs", "late.ckpt")
	tf := filepath.Join(dir, "ctl", "transfer.scrinfo")
	if err := os.MkdirAll(filepath.Dir(src), 0o700); err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Repeat("checkpoint ", 1000))
	store := handOver(t, tf, src, dest, int64(len(data)))
	logs := runObserved(t, tf)

	failures := func() (errs, debugs []observer.LoggedEntry) {
		for _, e := range logs.FilterMessage("copy failed").AllUntimed() {
			if e.Level == zapcore.ErrorLevel {
				errs = append(errs, e)
			} else if e.Level == zapcore.DebugLevel {
				debugs = append(debugs, e)
			}
		}
		return errs, debugs
	}
	recorded := func() string {
		tr, err := store.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range transfer.Read(tr).Files {
			return f.Error
		}
		return ""
	}

	// The source does not exist: the same error on every attempt.
	waitLogged(t, logs, "the ERROR recorded", func() bool { return strings.Contains(recorded(), "no such file") })
	mtime := func() time.Time {
		fi, err := os.Stat(tf)
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	wrote := mtime()
	seen := len(logs.FilterMessage("copy failed").AllUntimed())
	waitLogged(t, logs, "three failed attempts more", func() bool { e, d := failures(); return len(e)+len(d) >= seen+3 })
	if m := mtime(); !m.Equal(wrote) {
		t.Errorf("the transfer file was rewritten (modified %v, then %v) for a repeat of the same ERROR", wrote, m)
	}
	errs, debugs := failures()
	if len(errs) != 1 || len(debugs) < 2 {
		t.Fatalf("%d error and %d debug lines after %d attempts; want the first at error level, the repeats at debug", len(errs), len(debugs), len(errs)+len(debugs))
	}
	first := errs[0].ContextMap()
	if _, ok := first["retry_in"]; !ok || !strings.Contains(first["error"].(string), "no such file") {
		t.Errorf("first failure logged with %v; want the error and retry_in", first)
	}
	for _, d := range debugs {
		if d.ContextMap()["error"] != first["error"] {
			t.Errorf("a debug repeat of another error: %v", d.ContextMap())
		}
	}
	if got := recorded(); !strings.Contains(got, "no such file") {
		t.Errorf("ERROR %q in the transfer file", got)
	}

	// The error changes: a symbolic link is never followed at a source.
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, src); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, logs, "the changed error at error level", func() bool { e, _ := failures(); return len(e) >= 2 })
	errs, _ = failures()
	if len(errs) != 2 || errs[1].ContextMap()["error"] == first["error"] {
		t.Fatalf("error lines after the change: %v", errs)
	}
	changed := errs[1].ContextMap()["error"].(string)
	waitLogged(t, logs, "the changed error in the transfer file", func() bool { return recorded() == transfer.ErrorValue(changed) })
	before := len(logs.FilterMessage("copy failed").AllUntimed())
	waitLogged(t, logs, "a repeat of the changed error", func() bool { return len(logs.FilterMessage("copy failed").AllUntimed()) > before })
	if errs, _ = failures(); len(errs) != 2 {
		t.Fatalf("a repeat of the changed error logged at error level: %v", errs[2:])
	}

	// The source appears: flushed, "recovered" logged once.
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(target, src); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, logs, "the flush to complete", func() bool {
		tr, err := store.Read()
		return err == nil && transfer.Read(tr).Done
	})
	rec := logs.FilterMessage("recovered").AllUntimed()
	if len(rec) != 1 || rec[0].Level != zapcore.InfoLevel || rec[0].ContextMap()["src"] != src ||
		rec[0].ContextMap()["last_error"] != transfer.ErrorValue(changed) {
		t.Fatalf("recovered lines: %v", rec)
	}
	if got, err := os.ReadFile(dest); err != nil || string(got) != string(data) {
		t.Fatalf("destination: %v", err)
	}
	if got := recorded(); got != "" {
		t.Errorf("ERROR %q left after the flush", got)
	}
}

// TestStaleWriteFailureNotReported: a copy whose record failed for want of
// room, and whose result reaches the loop only after the loop has found the
// transfer file writable again ("readable again"), does not raise the
// problem a second time; a record that fails after that rewrite does.
func TestStaleWriteFailureNotReported(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	store := hashfile.NewStore(tf, hashfile.Flock)
	update := func() {
		t.Helper()
		if _, _, err := store.Update(func(tr *hashfile.Tree) error {
			transfer.SetCommand(tr, transfer.Run)
			transfer.SetState(tr, transfer.Running)
			transfer.AddFile(tr, "/cache/"+strconv.FormatUint(store.Rewrites(), 10), "/pfs/x", 1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	update()
	core, logs := observer.New(zapcore.DebugLevel)
	d := &daemon{log: zap.New(core), store: store, beat: NewHeartbeat(0), retries: map[string]*retry{},
		logOnce: logOnce{warned: map[string]string{}}, rand: func() float64 { return 0.5 },
		cfg: Settings{RetryMin: time.Second, RetryMax: time.Minute}}
	failed := func() result {
		// As hashfile reports an update it could not write, now.
		we := &hashfile.WriteError{Path: tf, Err: unix.EFBIG, Rewrites: store.Rewrites()}
		return result{job: &job{file: transfer.File{Src: "/cache/n0.ckpt", Dest: "/pfs/n0.ckpt", Size: 3000}, cancel: func() {}},
			err: fmt.Errorf("recording WRITTEN 3000: %w", we)}
	}
	complaints := func() int {
		return logs.FilterMessage("cannot rewrite the transfer file; its old image is intact, retrying").Len()
	}

	d.fileError(failed().err) // the loop's own pass could not rewrite the file
	stale := failed()         // nor could the copy's record, at the same time
	update()                  // then the room came back, and the loop's pass rewrote the file
	d.fileUsable()
	if logs.FilterMessage("transfer file readable again").Len() != 1 {
		t.Fatal(`"transfer file readable again" not logged`)
	}
	d.finish(stale)
	if c := complaints(); c != 1 {
		t.Fatalf("the problem was logged %d times, want once: a failure from before the file was rewritten was reported after it", c)
	}
	if d.fileErr != "" {
		t.Errorf("a failure from before the rewrite set the transfer file's problem again: %q", d.fileErr)
	}
	if d.retries["/cache/n0.ckpt"] == nil {
		t.Error("the file whose record failed is not waiting to be tried again")
	}

	d.finish(failed()) // a record that fails now, after the rewrite, is news
	if c := complaints(); c != 2 {
		t.Fatalf("a failure after the rewrite was logged %d times in all, want 2", c)
	}
}
