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
	"strconv"
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
	for _, status := range []int{0, 3} {
		t.Run(map[int]string{0: "application succeeds", 3: "application fails"}[status], func(t *testing.T) {
			j := newFlushJob(t)
			code := j.run(t, "APP_STATUS="+strconv.Itoa(status))
			if code != status {
				t.Fatalf("job exit status %d, want the application's %d", code, status)
			}
			j.flushed(t)
			if _, err := os.Stat(filepath.Join(j.shm, j.user, "scr.4242")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the node-local cache and control directory are still there after a complete flush (%v)", err)
			}
			log, err := os.ReadFile(filepath.Join(j.work, "scr-transferd.4242.node0.log"))
			if err != nil || !bytes.Contains(log, []byte(`"level":"info"`)) {
				t.Errorf("no JSON log named after the node: %v\n%s", err, log)
			}
			if !regexp.MustCompile(`(?m)^node0: `).MatchString(j.out) {
				t.Error("no output line names the node")
			}
			// The control directory is made on every node before any
			// scr-ctl command waits for the daemons.
			mkdir, wait := -1, -1
			for i, line := range strings.Split(j.steps, "\n") {
				if strings.Contains(line, "mkdir") && mkdir < 0 {
					mkdir = i
				}
				if strings.Contains(line, "scr-ctl") && strings.Contains(line, "--wait") && wait < 0 {
					wait = i
				}
			}
			if mkdir < 0 || mkdir > wait {
				t.Errorf("no step creates the control directory before the first scr-ctl --wait:\n%s", j.steps)
			}
		})
	}
}

// TestFlushJobScriptBesideAnotherDaemon: a daemon not the job's (a site
// prolog's) already serves the transfer file. The job's daemon exits 3 —
// at once, or only once the job waits for its flush, as on a busy node —
// and the job uses the other one: it flushes everything, exits 0, never
// stops that daemon, and leaves the cache it serves to the site's epilog.
func TestFlushJobScriptBesideAnotherDaemon(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "job daemon fails at once", true: "job daemon fails late"}[late], func(t *testing.T) {
			j := newFlushJob(t)
			cntl := filepath.Join(j.shm, j.user, "scr.4242")
			mustMkdir(t, cntl)
			transfer := filepath.Join(cntl, "transfer.scrinfo")
			other := testenv.Start(t, exec.Command(bins.Path(t, "scr-transferd"), transfer))
			j.waitServed(t, transfer)
			var env []string
			if late {
				// The job's daemon starts once the job waits for the flush.
				shim := filepath.Join(j.bin, "scr-transferd")
				if err := os.Remove(shim); err != nil {
					t.Fatal(err)
				}
				script := "#!/bin/bash\nuntil grep -q 'scr-ctl wait' \"$FAKE_SRUN_LOG\"; do sleep 0.05; done\nexec " +
					bins.Path(t, "scr-transferd") + " \"$@\"\n"
				if err := os.WriteFile(shim, []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if code := j.run(t, env...); code != 0 {
				t.Errorf("job exit status %d, want 0", code)
			}
			j.flushed(t)
			if !strings.Contains(j.out, "still serves") {
				t.Error("the output does not say that another daemon serves the transfer file")
			}
			if !other.Alive() {
				t.Errorf("the job stopped the daemon it did not start (%v):\n%s", other.Err(), other.Logs())
			}
			if _, err := os.Stat(filepath.Join(j.shm, j.user, "scr.4242", "ckpt.1", "rank_1")); err != nil {
				t.Errorf("the cache the other daemon serves was removed (the site's epilog reaps it): %v", err)
			}
		})
	}
}

// flushJob is deploy/slurm/flush-job.sbatch run as Slurm would in a
// one-node allocation of two tasks, with the real daemon and scr-ctl and
// testdata/fake-srun standing in for srun, the application fakeApp.
type flushJob struct {
	dir, bin, shm, work, want, dest, user string
	out, steps                            string // once run
}

func newFlushJob(t *testing.T) *flushJob {
	t.Helper()
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	j := &flushJob{dir: dir, bin: filepath.Join(dir, "bin"), shm: filepath.Join(dir, "shm"),
		work: filepath.Join(dir, "work"), want: filepath.Join(dir, "want"), dest: filepath.Join(dir, "pfs"), user: me.Username}
	for _, d := range []string{j.bin, j.shm, j.work, j.want} {
		mustMkdir(t, d)
	}
	buildTools(t, j.bin)
	srun, err := filepath.Abs("testdata/fake-srun")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(srun, filepath.Join(j.bin, "srun")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app"), []byte(fakeApp), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 400000)
	_, _ = rand.Read(b)
	if err := os.WriteFile(filepath.Join(dir, "random"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return j
}

// run runs the job script with env added and returns its exit status.
func (j *flushJob) run(t *testing.T, env ...string) int {
	t.Helper()
	script, err := filepath.Abs("slurm/flush-job.sbatch")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tool(t, "bash", "bash"), script, filepath.Join(j.dir, "app"))
	cmd.Dir = j.work
	cmd.Env = append(os.Environ(),
		"PATH="+j.bin+":"+os.Getenv("PATH"),
		"USER="+j.user,
		"SLURM_JOB_ID=4242", "SLURM_JOB_NUM_NODES=1", "SLURM_NTASKS=2",
		"SCR_CNTL_BASE="+j.shm, "SCR_CACHE_BASE="+j.shm,
		"FAKE_SRUN_LOG="+filepath.Join(j.dir, "steps"),
		"RANDOM_SOURCE="+filepath.Join(j.dir, "random"), "WANT="+j.want, "DEST="+j.dest,
	)
	cmd.Env = append(cmd.Env, env...)
	// Its own process group: whatever the script leaves running
	// (a daemon, should it fail) is killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := testenv.Start(t, cmd)
	t.Cleanup(func() { _ = syscall.Kill(-p.Pid(), syscall.SIGKILL) })
	code := p.Wait(5 * time.Minute)
	steps, _ := os.ReadFile(filepath.Join(j.dir, "steps"))
	j.out, j.steps = p.Logs(), string(steps)
	t.Logf("job output:\n%s\nsteps:\n%s", j.out, j.steps)
	return code
}

// flushed checks that the application's three files are at their
// destinations byte for byte.
func (j *flushJob) flushed(t *testing.T) { flushedAll(t, j.want, j.dest) }

// flushedAll checks that fakeApp's three files, kept in want, are in dest
// byte for byte.
func flushedAll(t *testing.T, want, dest string) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		name := "rank_" + strconv.Itoa(i)
		w, err := os.ReadFile(filepath.Join(want, name))
		if err != nil {
			t.Fatal(err)
		}
		if g, err := os.ReadFile(filepath.Join(dest, name)); err != nil || !bytes.Equal(g, w) {
			t.Errorf("%s not flushed byte for byte (%v)", name, err)
		}
	}
}

// waitServed waits until a daemon serves transfer (it has recorded its
// first STATE, as scr-ctl stop --wait sees it).
func (j *flushJob) waitServed(t *testing.T, transfer string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(j.bin, "scr-ctl"), "stop", "--wait", "--create", "--grace=60s", "--timeout=60s", transfer)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("no daemon serves %s: %v\n%s", transfer, err, out)
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
