package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/cache/cachetest"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// bins is this package's once-per-process build of scr-ctl and
// scr-transferd, for the tests that run real processes.
var bins = testenv.NewBinaries(testenv.Build{})

// The binaries, built before the tests run.
var (
	ctlBin    string
	daemonBin string
)

func TestMain(m *testing.M) {
	dir, err := bins.Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctlBin = filepath.Join(dir, testenv.Ctl)
	daemonBin = filepath.Join(dir, testenv.Daemon)
	os.Exit(testenv.Main(m, bins))
}

// result is what a command printed and its exit status.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs the scr-ctl binary.
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctlBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("scr-ctl %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// inproc runs scr-ctl in this process, as a person at a pipe would see it.
func inproc(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	e := &env{ctx: ctx, stdout: &out, stderr: &errb, now: time.Now, term: func() (bool, int, int) { return false, 0, 0 }}
	code := runEnv(e, args)
	return result{out.String(), errb.String(), code}
}

// startDaemon starts the daemon on tf and returns once the daemon has
// answered in it (STATE); it is killed at the end of the test if still
// running, and its log is shown if the test failed.
func startDaemon(t *testing.T, tf string) *testenv.Process {
	t.Helper()
	p := testenv.Start(t, exec.Command(daemonBin, "--poll=100ms", "--retry-min=100ms", "--sync-interval=100ms", "--create-dir", tf))
	// Ready once it has answered in the transfer file, which it creates
	// if need be: a command given before that, on a loaded machine, could
	// find no transfer file yet ("no such transfer file").
	store := hashfile.NewStore(tf, hashfile.Flock)
	testenv.WaitFor(t, "the daemon to answer in "+tf, time.Minute, func() bool {
		if !p.Alive() {
			t.Fatalf("the daemon exited as it started (%v)", p.Err())
		}
		tree, err := store.Read()
		return err == nil && transfer.Read(tree).State != ""
	})
	return p
}

// wantExit waits for the daemon to exit with status 0.
func wantExit(t *testing.T, d *testenv.Process, within time.Duration) {
	t.Helper()
	if code := d.Wait(within); code != 0 {
		t.Fatalf("daemon exit: %v", d.Err())
	}
}

// writeFile writes n bytes of a pattern to path, creating its directory.
func writeFile(t *testing.T, path string, n int, seed uint32) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, cachetest.Fill(n, seed), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	same, _, err := compareFiles(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !same {
		t.Fatalf("%s and %s differ", a, b)
	}
}

func wantCode(t *testing.T, r result, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit %d, got %s", what, code, r)
	}
}

func wantIn(t *testing.T, s, sub, what string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Fatalf("%s: %q not in:\n%s", what, sub, s)
	}
}
