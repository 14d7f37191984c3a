package testenv

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeTB records what a helper reports instead of failing the real test;
// Fatal and FailNow end the goroutine as the real ones do.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	msgs   []string
	failed bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) record(fail bool, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, msg)
	f.failed = f.failed || fail
}

func (f *fakeTB) Errorf(format string, args ...any) { f.record(true, fmt.Sprintf(format, args...)) }
func (f *fakeTB) Logf(format string, args ...any)   { f.record(false, fmt.Sprintf(format, args...)) }
func (f *fakeTB) Fatal(args ...any)                 { f.record(true, fmt.Sprint(args...)); runtime.Goexit() }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.record(true, fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fakeTB) Skip(args ...any) { f.record(false, "skip: "+fmt.Sprint(args...)); runtime.Goexit() }
func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// report returns everything recorded, one message a line.
func (f *fakeTB) report() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// inGoroutine runs fn on its own goroutine, as a test body whose Fatal
// ends only that goroutine, and waits for it.
func inGoroutine(fn func()) {
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	<-done
}

// fakeClock is a clock whose sleeps advance it, recording when cond ran.
type fakeClock struct {
	t      time.Time
	sleeps []time.Duration
}

func (c *fakeClock) clock() clock {
	return clock{now: func() time.Time { return c.t }, sleep: func(d time.Duration) {
		c.sleeps = append(c.sleeps, d)
		c.t = c.t.Add(d)
	}}
}

func TestPollDeadline(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		timeout   time.Duration
		trueAfter time.Duration // cond holds from t0+trueAfter on; <0 never
		want      bool
		wantEvals int
		lastEval  time.Duration // time of the last evaluation, from t0
		interval  time.Duration // 0: PollInterval
	}{
		{"holds at once", time.Second, 0, true, 1, 0, 0},
		{"holds at once, zero timeout", 0, 0, true, 1, 0, 0},
		{"never, zero timeout: evaluated once", 0, -1, false, 1, 0, 0},
		{"holds after 12 ms", time.Second, 12 * time.Millisecond, true, 4, 15 * time.Millisecond, 0},
		{"never: last evaluation at the deadline", 20 * time.Millisecond, -1, false, 5, 20 * time.Millisecond, 0},
		{"never, timeout not a multiple of the interval", 12 * time.Millisecond, -1, false, 4, 12 * time.Millisecond, 0},
		{"holds just at the deadline", 12 * time.Millisecond, 12 * time.Millisecond, true, 4, 12 * time.Millisecond, 0},
		{"every 200 ms, holds after 300 ms", time.Second, 300 * time.Millisecond, true, 3, 400 * time.Millisecond, 200 * time.Millisecond},
		{"every 200 ms, never", 500 * time.Millisecond, -1, false, 4, 500 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fc := &fakeClock{t: t0}
			var evals []time.Duration
			interval := cmp.Or(tc.interval, PollInterval)
			got := poll(fc.clock(), interval, tc.timeout, func() bool {
				at := fc.t.Sub(t0)
				evals = append(evals, at)
				return tc.trueAfter >= 0 && at >= tc.trueAfter
			})
			if got != tc.want || len(evals) != tc.wantEvals || evals[len(evals)-1] != tc.lastEval {
				t.Fatalf("poll = %v after evaluations at %v; want %v after %d, the last at %v", got, evals, tc.want, tc.wantEvals, tc.lastEval)
			}
			for _, d := range fc.sleeps {
				if d <= 0 || d > interval {
					t.Fatalf("slept %v, want (0, %v]", d, interval)
				}
			}
		})
	}
}

func TestWaitForFailsAfterTimeout(t *testing.T) {
	f := &fakeTB{}
	const timeout = 30 * time.Millisecond
	var start time.Time
	var last time.Duration
	inGoroutine(func() {
		start = time.Now()
		WaitFor(f, "the impossible", timeout, func() bool { last = time.Since(start); return false })
	})
	if !f.Failed() || !strings.Contains(f.report(), "timed out after 30ms waiting for the impossible") {
		t.Fatalf("WaitFor reported %q (failed %v)", f.report(), f.Failed())
	}
	if last < timeout {
		t.Fatalf("the condition was last evaluated %v after the start, before the %v deadline", last, timeout)
	}
}

func TestWaitForReturnsWhenTheConditionHolds(t *testing.T) {
	f := &fakeTB{}
	n := 0
	inGoroutine(func() { WaitFor(f, "three polls", time.Minute, func() bool { n++; return n == 3 }) })
	if f.Failed() || n != 3 {
		t.Fatalf("after %d evaluations: %q", n, f.report())
	}
}

func TestSyncBufferConcurrentWriters(t *testing.T) {
	var b SyncBuffer
	const writers, lines = 4, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() { // a reader polling while the writers write, as a test polls a log
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
				s := b.String()
				if n := b.Len(); len(s) > n {
					t.Errorf("String has %d bytes, more than Len %d read after it", len(s), n)
				}
			}
		}
	}()
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(&b, "writer %d line %d\n", w, i)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-readerDone
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		var w, i int
		if _, err := fmt.Sscanf(l, "writer %d line %d", &w, &i); err != nil {
			t.Fatalf("torn line %q: %v", l, err)
		}
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	tests := []struct {
		name     string
		file     *string // the golden file's content before; nil: missing
		got      string
		rewrite  bool
		wantFail string // "" for success
		wantFile string // the file's content after
	}{
		{"missing", nil, "a\n", false, "go test -update writes it", ""},
		{"missing, -update", nil, "a\n", true, "", "a\n"},
		{"equal", ptr("a\n"), "a\n", false, "", "a\n"},
		{"differs", ptr("a\n"), "b\n", false, "differs from what the test produced", "a\n"},
		{"differs, -update", ptr("a\n"), "b\n", true, "", "b\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(path)
			if tc.file != nil {
				if err := os.WriteFile(path, []byte(*tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f := &fakeTB{}
			inGoroutine(func() { golden(f, path, []byte(tc.got), tc.rewrite) })
			if tc.wantFail == "" && f.Failed() || tc.wantFail != "" && !strings.Contains(f.report(), tc.wantFail) {
				t.Fatalf("reported %q, want %q", f.report(), tc.wantFail)
			}
			after, _ := os.ReadFile(path)
			if string(after) != tc.wantFile {
				t.Fatalf("golden file now %q, want %q", after, tc.wantFile)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestBuildArgs(t *testing.T) {
	tests := []struct {
		b    Build
		want string
	}{
		{Build{}, "build -o D " + modulePath + "/cmd/scr-transferd " + modulePath + "/cmd/scr-ctl"},
		{Build{Race: true, Commands: []string{Daemon}}, "build -o D -race " + modulePath + "/cmd/scr-transferd"},
		{Build{Static: true, Commands: []string{Ctl}}, "build -o D " + modulePath + "/cmd/scr-ctl"},
		{Build{Commands: []string{"internal/fusetest/cmd/fusemount"}}, "build -o D " + modulePath + "/internal/fusetest/cmd/fusemount"},
	}
	for _, tc := range tests {
		if got := strings.Join(tc.b.args("D"), " "); got != tc.want {
			t.Errorf("%+v: go %s, want go %s", tc.b, got, tc.want)
		}
	}
}

// TestBinariesBuiltOnceAndRemoved builds scr-ctl with a script beside
// it, checks that a second request reuses the build and that Remove
// deletes it.
func TestBinariesBuiltOnceAndRemoved(t *testing.T) {
	script := filepath.Join(t.TempDir(), "reap.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho reaped\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := NewBinaries(Build{Commands: []string{Ctl}, Beside: map[string]string{"scr-reap": script}})
	dir := b.Need(t)
	t.Cleanup(func() { os.RemoveAll(dir) })
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%s: %v, want mode 0755 (%v)", dir, fi.Mode(), err)
	}
	if out, err := exec.Command(filepath.Join(dir, "scr-reap")).CombinedOutput(); err != nil || string(out) != "reaped\n" {
		t.Fatalf("the script copied beside the commands: %v, %q", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "scr-reap")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the script beside the commands: %v, want mode 0755 (%v)", fi.Mode(), err)
	}
	out, err := exec.Command(b.Path(t, Ctl), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("scr-ctl --version: %v\n%s", err, out)
	}
	if again := b.Need(t); again != dir {
		t.Fatalf("second request built again into %s (first %s)", again, dir)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there after Remove: %v", dir, err)
	}
	if _, err := b.Dir(); err == nil {
		t.Fatal("Dir after Remove returned no error")
	}
}

// TestProcessOutputKeptApart: a standard output the test set is its own;
// standard error still goes to the log.
func TestProcessOutputKeptApart(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo result; echo >&2 a message")
	out := &SyncBuffer{}
	cmd.Stdout = out
	p := Start(t, cmd)
	if code := p.Wait(time.Minute); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if out.String() != "result\n" || p.Logs() != "a message\n" {
		t.Fatalf("standard output %q, log %q; want %q and %q", out.String(), p.Logs(), "result\n", "a message\n")
	}
}

func TestProcessExitCodeAndLog(t *testing.T) {
	p := Start(t, exec.Command("sh", "-c", "echo starting; echo >&2 copy done a.ckpt; exit 3"))
	if line := p.WaitLogAfter(0, time.Minute, "done", "a.ckpt"); line != "copy done a.ckpt\n" {
		t.Fatalf("WaitLogAfter returned %q", line)
	}
	if code := p.Wait(time.Minute); code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
	if p.Alive() || p.Err() == nil {
		t.Fatalf("after exit 3: alive %v, err %v", p.Alive(), p.Err())
	}
	if got := p.Logs(); got != "starting\ncopy done a.ckpt\n" {
		t.Fatalf("log %q", got)
	}
}

func TestProcessWaitLogAfterFailsWhenTheProcessExits(t *testing.T) {
	f := &fakeTB{TB: t}
	var p *Process
	inGoroutine(func() {
		p = Start(f, exec.Command("sh", "-c", "echo old news; exit 0"))
		p.WaitLogAfter(0, time.Hour, "never said")
	})
	if !strings.Contains(f.report(), "exited (<nil>) before its log said") {
		t.Fatalf("reported %q", f.report())
	}
}

func TestProcessSignalAndCleanup(t *testing.T) {
	var p *Process
	t.Run("signal", func(t *testing.T) {
		p = Start(t, exec.Command("sleep", "600"))
		mark := p.LogMark()
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(time.Minute); code != -1 {
			t.Fatalf("exit code %d after SIGTERM, want -1 (killed by a signal)", code)
		}
		if mark != 0 {
			t.Fatalf("LogMark %d on an empty log", mark)
		}
	})
	t.Run("killed at the end of the test", func(t *testing.T) {
		p = Start(t, exec.Command("sleep", "600"))
	})
	select {
	case <-p.Done():
	default:
		t.Fatal("the process outlived its test")
	}
}

// longChildEnv, in a child of the test binary, makes TestLong call Long.
const longChildEnv = "TESTENV_LONG_CHILD"

// TestLong runs Long in a child of the test binary with and without
// -short, in and out of CI: skipped under -short, a failure under -short
// with CI=true, run otherwise.
func TestAbsent(t *testing.T) {
	tests := []struct {
		ci       bool
		wantFail bool
		want     string
	}{
		{false, false, "skip: no frobnicator (apt-get install frob)"},
		{true, true, "missing under CI=true, which provides it: no frobnicator (apt-get install frob)"},
	}
	for _, tc := range tests {
		f := &fakeTB{}
		reached := false
		inGoroutine(func() { absent(f, tc.ci, "no frobnicator (apt-get install frob)"); reached = true })
		if reached || f.Failed() != tc.wantFail || f.report() != tc.want {
			t.Errorf("CI %v: test went on %v, failed %v, said %q; want failed %v, %q", tc.ci, reached, f.Failed(), f.report(), tc.wantFail, tc.want)
		}
	}
}

func TestLong(t *testing.T) {
	if os.Getenv(longChildEnv) != "" {
		Long(t, "a long test")
		return
	}
	tests := []struct {
		short bool
		ci    string
		want  string
	}{
		{false, "", "--- PASS"},
		{false, "true", "--- PASS"},
		{true, "", "--- SKIP"},
		{true, "true", "--- FAIL"},
	}
	for _, tc := range tests {
		args := []string{"-test.run=^TestLong$", "-test.v"}
		if tc.short {
			args = append(args, "-test.short")
		}
		cmd := exec.Command(os.Args[0], args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, longChildEnv+"=1", "CI="+tc.ci)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("-short %v CI=%q: want %s in:\n%s", tc.short, tc.ci, tc.want, out)
		}
	}
}

func TestNewNode(t *testing.T) {
	n := NewNode(t)
	for _, d := range []string{n.Cache, n.PFS, n.Control} {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 || filepath.Dir(d) != n.Root {
			t.Fatalf("%s: %v (%v), want a 0755 directory in %s", d, fi.Mode(), err, n.Root)
		}
	}
	if n.Transfer != filepath.Join(n.Control, "transfer.scrinfo") {
		t.Fatalf("transfer file %s", n.Transfer)
	}
	if _, err := os.Stat(n.Transfer); !os.IsNotExist(err) {
		t.Fatalf("the transfer file exists before the library or the daemon made it: %v", err)
	}
}
