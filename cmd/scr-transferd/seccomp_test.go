package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/seccomptest"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
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
	testenv.Long(t, "builds and runs the daemon")
	dir := t.TempDir()
	bin := bins.Path(t, testenv.Daemon)
	for _, d := range []string{"cache", "pfs", "ctl"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"--log-format=json", "--allow-src=" + filepath.Join(dir, "cache"), "--allow-dest=" + filepath.Join(dir, "pfs"),
		filepath.Join(dir, "ctl", "transfer.scrinfo")}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonNamesSeccompWhenOpenat2IsRefused$")
	cmd.Env = append(os.Environ(), seccompExecEnv+"="+bin, seccompExecEnv+"_ARGS="+strings.Join(args, "\x1f"))
	d := testenv.Start(t, cmd)
	defer func() {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		<-d.Done()
	}()
	line := d.WaitLogAfter(0, 2*time.Minute, "confined files cannot be opened")
	for _, want := range []string{"confined files cannot be opened", "RestrictSUIDSGID=yes", "function not implemented"} {
		if !strings.Contains(line, want) {
			t.Errorf("start-up log %q does not say %q", line, want)
		}
	}
}
