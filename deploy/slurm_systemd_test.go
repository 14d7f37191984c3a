package deploy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// systemdJob is a run of deploy/slurm/flush-job-systemd.sbatch with
// testdata/fake-srun and testdata/fake-systemctl, which plays the user's
// service manager: it runs the daemon in a session of its own, outside the
// job, as a user unit would be.
type systemdJob struct {
	dir, shm, work, want, dest, state, runtime string
	user                                       string
	*testenv.Process                           // the job script, in a process group of its own
}

const slowApp = `#!/bin/bash
set -euo pipefail
cache=$SCR_CACHE_BASE/$USER/scr.$SLURM_JOB_ID
transfer=$SCR_CNTL_BASE/$USER/scr.$SLURM_JOB_ID/transfer.scrinfo
mkdir -p "$cache" "$DEST"
head -c 2000000 "$RANDOM_SOURCE" > "$cache/rank_1"
scr-ctl add "$transfer" "$cache/rank_1" "$DEST/rank_1"
scr-ctl set "$transfer" bw 100000
scr-ctl run "$transfer"
touch "$STARTED"
exec sleep 300
`

func startSystemdJob(t *testing.T, app string, userManager bool, env ...string) *systemdJob {
	t.Helper()
	bash := tool(t, "bash", "bash")
	tool(t, "systemd-escape", "systemd")
	tool(t, "setsid", "util-linux")
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	j := &systemdJob{dir: t.TempDir(), user: me.Username}
	bin := filepath.Join(j.dir, "bin")
	j.shm, j.work, j.want, j.dest = filepath.Join(j.dir, "shm"), filepath.Join(j.dir, "work"), filepath.Join(j.dir, "want"), filepath.Join(j.dir, "pfs")
	j.state, j.runtime = filepath.Join(j.dir, "state"), filepath.Join(j.dir, "run")
	for _, d := range []string{bin, j.shm, j.work, j.want, j.state, filepath.Join(j.runtime, "systemd")} {
		mustMkdir(t, d)
	}
	buildTools(t, bin)
	for name, fake := range map[string]string{"srun": "testdata/fake-srun", "systemctl": "testdata/fake-systemctl"} {
		abs, err := filepath.Abs(fake)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	appPath := filepath.Join(j.dir, "app")
	if err := os.WriteFile(appPath, []byte(app), 0o755); err != nil {
		t.Fatal(err)
	}
	random := filepath.Join(j.dir, "random")
	b := make([]byte, 2000000)
	_, _ = rand.Read(b)
	if err := os.WriteFile(random, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if userManager {
		// The socket systemctl --user looks for.
		l, err := net.Listen("unix", filepath.Join(j.runtime, "systemd", "private"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	script, err := filepath.Abs("slurm/flush-job-systemd.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script, appPath)
	cmd.Dir = j.work
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	base := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") {
			base = append(base, kv)
		}
	}
	cmd.Env = append(base,
		"PATH="+bin+":"+os.Getenv("PATH"),
		"USER="+me.Username,
		"SLURM_JOB_ID=4343", "SLURM_JOB_NUM_NODES=1", "SLURM_NTASKS=2",
		"SCR_CNTL_BASE="+j.shm, "SCR_CACHE_BASE="+j.shm, "SCR_PREFIX="+j.dest,
		"FAKE_SRUN_LOG="+filepath.Join(j.dir, "steps"),
		"FAKE_SYSTEMCTL_LOG="+filepath.Join(j.dir, "systemctl"), "FAKE_SYSTEMCTL_STATE="+j.state,
		"RANDOM_SOURCE="+random, "WANT="+j.want, "DEST="+j.dest, "STARTED="+filepath.Join(j.dir, "started"),
	)
	if userManager {
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+j.runtime)
	}
	cmd.Env = append(cmd.Env, env...)
	j.Process = testenv.Start(t, cmd)
	t.Cleanup(func() {
		_ = syscall.Kill(-j.Pid(), syscall.SIGKILL)
		// A daemon the script failed to stop is stopped here.
		pids, _ := filepath.Glob(filepath.Join(j.state, "*.pid"))
		for _, p := range pids {
			if b, err := os.ReadFile(p); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	return j
}

// wait waits for the job script to end and returns its exit status.
func (j *systemdJob) wait(t *testing.T) int {
	t.Helper()
	code := j.Wait(5 * time.Minute)
	steps, _ := os.ReadFile(filepath.Join(j.dir, "steps"))
	calls, _ := os.ReadFile(filepath.Join(j.dir, "systemctl"))
	t.Logf("job output:\n%s\nsteps:\n%s\nsystemctl calls:\n%s", j.Logs(), steps, calls)
	return code
}

// daemonStopped checks that the daemon the fake user manager started was
// stopped through systemctl --user stop and no longer runs, and that the
// job's drop-in is gone.
func (j *systemdJob) daemonStopped(t *testing.T) {
	t.Helper()
	pids, _ := filepath.Glob(filepath.Join(j.state, "*.pid"))
	if len(pids) != 1 {
		t.Fatalf("%d units started, want 1", len(pids))
	}
	b, err := os.ReadFile(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	stopped, _ := os.ReadFile(filepath.Join(j.state, "stopped"))
	if !strings.Contains(string(stopped), pid) {
		t.Errorf("the unit (daemon PID %s) was not stopped with systemctl --user stop", pid)
	}
	if st, err := os.ReadFile("/proc/" + pid + "/stat"); err == nil && !bytes.Contains(st, []byte(") Z")) {
		t.Errorf("the daemon (PID %s) still runs after the job", pid)
	}
	dropins, _ := filepath.Glob(filepath.Join(j.runtime, "systemd", "user", "*.d", "job.conf"))
	if len(dropins) != 0 {
		t.Errorf("the job's drop-in is left: %v", dropins)
	}
}

// TestSystemdJobScriptApplicationFails: the application hands a checkpoint
// over and exits 3; the script waits for the flush, stops the unit and
// exits 3.
func TestSystemdJobScriptApplicationFails(t *testing.T) {
	j := startSystemdJob(t, fakeApp, true, "APP_STATUS=3")
	if code := j.wait(t); code != 3 {
		t.Errorf("job exit status %d, want the application's 3", code)
	}
	flushedAll(t, j.want, j.dest)
	j.daemonStopped(t)
	if _, err := os.Stat(filepath.Join(j.shm, j.user, "scr.4343")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the node-local cache is still there after a complete flush (%v)", err)
	}
}

// TestSystemdJobScriptCancelled: scancel signals the job's processes; the
// user unit lives outside the job, so the script's per-node step must
// stop it.
func TestSystemdJobScriptCancelled(t *testing.T) {
	j := startSystemdJob(t, slowApp, true)
	started := filepath.Join(j.dir, "started")
	testenv.WaitFor(t, "the application to start", 3*time.Minute, func() bool {
		if _, err := os.Stat(started); err == nil {
			return true
		}
		if !j.Alive() {
			j.wait(t)
			t.Fatal("the job ended before the application started")
		}
		return false
	})
	// What scancel does: SIGTERM to every process of the job.
	if err := syscall.Kill(-j.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(t); code == 0 {
		t.Error("a cancelled job exited 0")
	}
	// Slurm reports a script killed by SIGTERM as cancelled (0:15); an
	// exit status of its own (143) reads as 143:0.
	if ws, ok := j.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("the cancelled script ended with %v, want killed by SIGTERM (Slurm's 0:15)", j.Cmd.ProcessState)
	}
	j.daemonStopped(t)
}

// TestSystemdJobScriptWithoutUserManager: without pam_systemd
// XDG_RUNTIME_DIR is unset; the script looks in /run/user/UID and, with no
// user manager there, says what to enable and does not start the
// application.
func TestSystemdJobScriptWithoutUserManager(t *testing.T) {
	if _, err := os.Stat("/run/user/" + strconv.Itoa(os.Getuid()) + "/systemd/private"); err == nil {
		t.Skip("this machine runs a user manager for this user; the case cannot be made here")
	}
	j := startSystemdJob(t, fakeApp, false)
	if code := j.wait(t); code == 0 {
		t.Error("the job succeeded without a user manager")
	}
	if !strings.Contains(j.Logs(), "no user manager at /run/user/"+strconv.Itoa(os.Getuid())) ||
		!strings.Contains(j.Logs(), "enable-linger") {
		t.Error("the output does not say that the user manager is missing and how to get one")
	}
	if _, err := os.Stat(filepath.Join(j.want, "rank_1")); err == nil {
		t.Error("the application ran without daemons")
	}
}

// TestSystemdJobScriptUsesADaemonAlreadyServing: on a node where another
// daemon (a site prolog's) already serves the transfer file, the unit's
// daemon exits 3 ("already served"); the job uses that daemon, flushes
// everything, exits 0, and leaves that daemon running and the cache to
// the site's epilog.
func TestSystemdJobScriptUsesADaemonAlreadyServing(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"unit fails at once", []string{"FAKE_SYSTEMCTL_OTHER_DAEMON=1"}},
		// The unit's start fails only once the job waits for its flush:
		// the job must not take the cache for its own when it ends first.
		{"unit fails late", []string{"FAKE_SYSTEMCTL_OTHER_DAEMON=1", "FAKE_SYSTEMCTL_LATE_UNIT=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) { jobBesideAnotherDaemon(t, tc.env) })
	}
}

func jobBesideAnotherDaemon(t *testing.T, env []string) {
	j := startSystemdJob(t, fakeApp, true, env...)
	if code := j.wait(t); code != 0 {
		t.Errorf("job exit status %d, want 0", code)
	}
	if !strings.Contains(j.Logs(), "still serves") {
		t.Error("the output does not say that another daemon serves the transfer file")
	}
	flushedAll(t, j.want, j.dest)
	b, err := os.ReadFile(filepath.Join(j.state, "other.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/stat"); err != nil || bytes.Contains(st, []byte(") Z")) {
		t.Errorf("the other daemon did not outlive the job (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(j.shm, j.user, "scr.4343", "ckpt.1", "rank_1")); err != nil {
		t.Errorf("the cache the other daemon serves was removed (the site's epilog reaps it): %v", err)
	}
}
