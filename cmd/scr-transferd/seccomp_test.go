package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/seccomptest"
)

// seccompExecEnv, in a child of the test binary, names a program to exec
// under the openat2-refusing filter.
const seccompExecEnv = "SCR_TRANSFERD_TEST_EXEC_UNDER_SECCOMP"

// TestDaemonNamesSeccompWhenOpenat2IsRefused runs the daemon with
// --allow-src/--allow-dest under the seccomp filter systemd's
// RestrictSUIDSGID=yes installs: it must say at start why every file
// will fail.
func TestDaemonNamesSeccompWhenOpenat2IsRefused(t *testing.T) {
	if bin := os.Getenv(seccompExecEnv); bin != "" {
		if err := seccomptest.RefuseOpenat2(); err != nil {
			t.Fatalf("seccomp: %v", err)
		}
		args := strings.Split(os.Getenv(seccompExecEnv+"_ARGS"), "\x1f")
		t.Fatal(syscall.Exec(bin, append([]string{bin}, args...), os.Environ()))
	}
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	dir := t.TempDir()
	bin := buildDaemon(t, dir)
	for _, d := range []string{"cache", "pfs", "ctl"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--log-format=json", "--allow-src=" + filepath.Join(dir, "cache"), "--allow-dest=" + filepath.Join(dir, "pfs"),
		filepath.Join(dir, "ctl", "transfer.scrinfo")}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonNamesSeccompWhenOpenat2IsRefused$")
	cmd.Env = append(os.Environ(), seccompExecEnv+"="+bin, seccompExecEnv+"_ARGS="+strings.Join(args, "\x1f"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var seen []string
		for sc.Scan() {
			seen = append(seen, sc.Text())
			if strings.Contains(sc.Text(), "confined files cannot be opened") {
				found <- sc.Text()
				return
			}
		}
		found <- "not logged; the daemon said:\n" + strings.Join(seen, "\n")
	}()
	select {
	case line := <-found:
		for _, want := range []string{"confined files cannot be opened", "RestrictSUIDSGID=yes", "function not implemented"} {
			if !strings.Contains(line, want) {
				t.Errorf("start-up log %q does not say %q", line, want)
			}
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("no start-up log line about openat2 within 2 minutes")
	}
}
