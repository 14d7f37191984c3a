package deploy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// buildTools puts scr-transferd and scr-ctl, as TestMain built them, into
// dir.
func buildTools(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"scr-transferd", "scr-ctl"} {
		if err := os.Symlink(bins.Path(t, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeApp plays the SCR library: it writes three checkpoint files to the
// node-local cache (and copies to compare with in $WANT), hands them to the
// daemon with scr-ctl add and run, and exits with $APP_STATUS.
const fakeApp = `#!/bin/bash
set -euo pipefail
cache=$SCR_CACHE_BASE/$USER/scr.$SLURM_JOB_ID
transfer=$SCR_CNTL_BASE/$USER/scr.$SLURM_JOB_ID/transfer.scrinfo
mkdir -p "$cache/ckpt.1" "$DEST"
for i in 1 2 3; do
    head -c $((100000 * i + 7)) "$RANDOM_SOURCE" > "$cache/ckpt.1/rank_$i"
    cp "$cache/ckpt.1/rank_$i" "$WANT/rank_$i"
    scr-ctl add "$transfer" "$cache/ckpt.1/rank_$i" "$DEST/rank_$i"
done
scr-ctl run "$transfer"
exit "${APP_STATUS:-0}"
`

// TestFlushJobScript runs deploy/slurm/flush-job.sbatch as Slurm would in
// a one-node allocation of two tasks, with the real daemon and scr-ctl and
// testdata/fake-srun standing in for srun (it refuses a per-node step that
// Slurm would run as several tasks per node). The application hands three
// files over and exits with a status: the job must flush them all, exit
// with the application's status, leave a log named after the node, name
// the node on its own lines, and clean the node-local cache.
func TestFlushJobScript(t *testing.T) {
	bash := tool(t, "bash", "bash")
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, status := range []int{0, 3} {
		t.Run(map[int]string{0: "application succeeds", 3: "application fails"}[status], func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			mustMkdir(t, bin)
			buildTools(t, bin)
			srun, err := filepath.Abs("testdata/fake-srun")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(srun, filepath.Join(bin, "srun")); err != nil {
				t.Fatal(err)
			}
			app := filepath.Join(dir, "app")
			if err := os.WriteFile(app, []byte(fakeApp), 0o755); err != nil {
				t.Fatal(err)
			}
			random := filepath.Join(dir, "random")
			b := make([]byte, 400000)
			_, _ = rand.Read(b)
			if err := os.WriteFile(random, b, 0o644); err != nil {
				t.Fatal(err)
			}
			shm, work, want, dest := filepath.Join(dir, "shm"), filepath.Join(dir, "work"), filepath.Join(dir, "want"), filepath.Join(dir, "pfs")
			for _, d := range []string{shm, work, want} {
				mustMkdir(t, d)
			}
			script, err := filepath.Abs("slurm/flush-job.sbatch")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bash, script, app)
			cmd.Dir = work
			cmd.Env = append(os.Environ(),
				"PATH="+bin+":"+os.Getenv("PATH"),
				"USER="+me.Username,
				"SLURM_JOB_ID=4242", "SLURM_JOB_NUM_NODES=1", "SLURM_NTASKS=2",
				"SCR_CNTL_BASE="+shm, "SCR_CACHE_BASE="+shm,
				"FAKE_SRUN_LOG="+filepath.Join(dir, "steps"),
				"RANDOM_SOURCE="+random, "WANT="+want, "DEST="+dest,
				"APP_STATUS="+string(rune('0'+status)),
			)
			// Its own process group: whatever the script leaves running
			// (a daemon, should it fail) is killed with it.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			p := testenv.Start(t, cmd)
			t.Cleanup(func() { _ = syscall.Kill(-p.Pid(), syscall.SIGKILL) })
			code := p.Wait(5 * time.Minute)
			out := p.Logs()
			steps, _ := os.ReadFile(filepath.Join(dir, "steps"))
			t.Logf("job output:\n%s\nsteps:\n%s", out, steps)
			if code != status {
				t.Fatalf("job exit status %d, want the application's %d", code, status)
			}
			for i := 1; i <= 3; i++ {
				name := "rank_" + string(rune('0'+i))
				w, err := os.ReadFile(filepath.Join(want, name))
				if err != nil {
					t.Fatal(err)
				}
				g, err := os.ReadFile(filepath.Join(dest, name))
				if err != nil || !bytes.Equal(g, w) {
					t.Errorf("%s not flushed byte for byte (%v)", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(shm, me.Username, "scr.4242")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the node-local cache and control directory are still there after a complete flush (%v)", err)
			}
			log, err := os.ReadFile(filepath.Join(work, "scr-transferd.4242.node0.log"))
			if err != nil || !bytes.Contains(log, []byte(`"level":"info"`)) {
				t.Errorf("no JSON log named after the node: %v\n%s", err, log)
			}
			if !regexp.MustCompile(`(?m)^node0: `).MatchString(out) {
				t.Error("no output line names the node")
			}
			// The control directory is made on every node before any
			// scr-ctl command waits for the daemons.
			mkdir, wait := -1, -1
			for i, line := range strings.Split(string(steps), "\n") {
				if strings.Contains(line, "mkdir") && mkdir < 0 {
					mkdir = i
				}
				if strings.Contains(line, "scr-ctl") && strings.Contains(line, "--wait") && wait < 0 {
					wait = i
				}
			}
			if mkdir < 0 || mkdir > wait {
				t.Errorf("no step creates the control directory before the first scr-ctl --wait:\n%s", steps)
			}
		})
	}
}

func mustMkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
}

// sruns returns the srun command lines of a script, continuation lines
// joined.
func sruns(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "srun ") {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestSlurmStepsOnePerNode: inside an allocation with more tasks, srun
// ignores --ntasks-per-node=1 unless -n asks for one task per node, and a
// step beside running steps needs --overlap. The application's own step
// ("$@") is the only one that spans the allocation's tasks.
func TestSlurmStepsOnePerNode(t *testing.T) {
	scripts, err := filepath.Glob("slurm/*.sbatch")
	if err != nil || len(scripts) < 2 {
		t.Fatalf("job scripts: %v %v", scripts, err)
	}
	for _, s := range scripts {
		lines := sruns(t, s)
		if len(lines) < 2 {
			t.Errorf("%s: %d srun lines", s, len(lines))
		}
		for _, l := range lines {
			if !strings.Contains(l, "--overlap") {
				t.Errorf("%s: srun without --overlap beside the daemons: %s", s, l)
			}
			if strings.HasPrefix(l, `srun --overlap "$@"`) {
				continue
			}
			for _, want := range []string{`-N "$SLURM_JOB_NUM_NODES"`, `-n "$SLURM_JOB_NUM_NODES"`, "--ntasks-per-node=1"} {
				if !strings.Contains(l, want) {
					t.Errorf("%s: per-node step without %s: %s", s, want, l)
				}
			}
		}
	}
}

// TestSlurmScriptsShellcheck runs shellcheck on every script.
func TestSlurmScriptsShellcheck(t *testing.T) {
	sc := tool(t, "shellcheck", "shellcheck")
	scripts, err := filepath.Glob("slurm/*")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in slurm/: %v", err)
	}
	scripts = append(scripts, "testdata/fake-srun")
	out, err := exec.Command(sc, append([]string{"-s", "bash"}, scripts...)...).CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}
