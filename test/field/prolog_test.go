package field

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// prologJob is a job submitted in the container by a given user on the
// prolog site the container's Slurm is (Prolog=, Epilog=, PrologFlags=Alloc).
type prologJob struct {
	t          *testing.T
	c          *container
	user, id   string
	work, pfs  string // in the container
	unit       string // the system unit's instance the prolog starts
	pidNS      string
	mu         sync.Mutex
	daemonUIDs map[int]string // PID -> real UID of every daemon serving the job
	stop, done chan struct{}
}

// submitAs submits script in the container as user from a fresh work
// directory in the user's home, with the stand-in application writing its
// checkpoints for /p/lustre/USER (the unit's --allow-dest), and watches
// every scr-transferd that serves the job's transfer file.
func submitAs(t *testing.T, c *container, user, script string, sbatch ...string) *prologJob {
	t.Helper()
	n := time.Now().UnixNano() % 1e9
	work := fmt.Sprintf("/home/%s/job.%d", user, n)
	pfs := fmt.Sprintf("/p/lustre/%s/job.%d", user, n)
	c.sh(t, "install", "-d", "-o", user, "-g", user, "-m", "0755", work, work+"/out", pfs)
	c.install(t, "testdata/simulation", work+"/simulation", 0o755)
	c.install(t, script, work+"/job.sbatch", 0o644)
	c.sh(t, "chown", user+":", work+"/simulation", work+"/job.sbatch")
	args := []string{"runuser", "-u", user, "--", "env", "FIELD_PFS=" + pfs, "FIELD_OUT=" + work + "/out",
		"FIELD_CKPTS=2", "FIELD_KB=200", "sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2",
		"--chdir=" + work, "--output=" + work + "/job.out"}
	args = append(append(args, sbatch...), work+"/job.sbatch")
	out := c.sh(t, args...)
	id := strings.TrimSpace(out)
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job ID", out)
	}
	pidNS, err := os.Readlink(filepath.Join("/proc", c.leader, "ns/pid"))
	if err != nil {
		t.Fatal(err)
	}
	transfer := fmt.Sprintf("/dev/shm/%s/scr.%s/transfer.scrinfo", user, id)
	j := &prologJob{t: t, c: c, user: user, id: id, work: work, pfs: pfs, pidNS: pidNS,
		unit:       "scr-transferd@" + strings.TrimSpace(c.sh(t, "systemd-escape", "--path", transfer)) + ".service",
		daemonUIDs: map[int]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("job %s output:\n%s", id, tail(c.path(work+"/job.out"), 60))
			if out, err := c.try("journalctl", "--no-pager", "-o", "short-precise", "-u", j.unit); err == nil {
				t.Logf("journal of %s:\n%s", j.unit, lastLines(out, 40))
			}
			if out, err := c.try("journalctl", "--no-pager", "-o", "short-precise",
				"-t", "scr-transferd-prolog", "-t", "scr-transferd-epilog", "-t", "scr-transferd-reap"); err == nil {
				t.Logf("journal of the prolog, epilog and reaper:\n%s", lastLines(out, 40))
			}
		}
		_, _ = c.try("scancel", id)
		_, _ = c.try("systemctl", "stop", j.unit)
		_, _ = c.try("rm", "-rf", work, pfs, filepath.Dir(transfer))
	})
	go j.watch(transfer)
	return j
}

// watch records the real UID of every scr-transferd serving transfer.
func (j *prologJob) watch(transfer string) {
	defer close(j.done)
	for {
		for _, p := range procsIn(j.pidNS) {
			if p.comm != "scr-transferd" || !strings.Contains(p.cmd, transfer) {
				continue
			}
			if uid := procUID(p.pid); uid != "" {
				j.mu.Lock()
				j.daemonUIDs[p.pid] = uid
				j.mu.Unlock()
			}
		}
		select {
		case <-j.stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// procUID returns the real UID of process pid, "" if it is gone.
func procUID(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// end waits for the job's end, stops the watch, and fails unless the job
// ended COMPLETED 0:0, every daemon that served it ran as the job's user
// (in the container's numbering, as /proc shows it from the host: the
// container shares the host's user namespace), and every checkpoint
// arrived byte for byte.
func (j *prologJob) end() {
	j.t.Helper()
	f := (&containerJob{t: j.t, c: j.c, id: j.id}).waitEnd()
	close(j.stop)
	<-j.done
	if f["JobState"] != "COMPLETED" || f["ExitCode"] != "0:0" {
		j.t.Errorf("job %s of %s: JobState=%s ExitCode=%s, want COMPLETED 0:0", j.id, j.user, f["JobState"], f["ExitCode"])
	}
	uid := strings.TrimSpace(j.c.sh(j.t, "id", "-u", j.user))
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.daemonUIDs) == 0 {
		j.t.Errorf("job %s of %s: no daemon served it", j.id, j.user)
	}
	for pid, got := range j.daemonUIDs {
		if got != uid {
			j.t.Errorf("job %s of %s: daemon PID %d ran as UID %s, want %s (%s)", j.id, j.user, pid, got, uid, j.user)
		}
	}
	entries := readManifests(j.t, j.c.path(j.work+"/out"))
	if want := 2 * 2 * 2; len(entries) != want {
		j.t.Fatalf("job %s: the application handed over %d files, want %d", j.id, len(entries), want)
	}
	for i := range entries {
		entries[i].dest = j.c.path(entries[i].dest)
	}
	sameBytes(j.t, entries)
}

// reaped waits (bounded: the epilog runs after the job's end) until the
// job's node-local directory is gone and the unit inactive.
func (j *prologJob) reaped() {
	j.t.Helper()
	dir := j.c.path(fmt.Sprintf("/dev/shm/%s/scr.%s", j.user, j.id))
	var (
		err   error
		state string
	)
	if !testenv.UntilEvery(100*time.Millisecond, lingerTimeout, func() bool {
		_, err = os.Stat(dir)
		state = j.c.show(j.t, j.unit, "ActiveState")["ActiveState"]
		return errors.Is(err, os.ErrNotExist) && state == "inactive"
	}) {
		j.t.Fatalf("job %s: %v after its end: cache %s (%v), unit %s", j.id, lingerTimeout, dir, err, state)
	}
}

// staleCache plants the node-local directory of an ended job (one Slurm
// has never heard of) of user, with a transfer file whose flush is
// complete, or, if unfinished, one with a file not flushed; it returns its
// path in the container.
func staleCache(t *testing.T, c *container, user string, id int, unfinished bool) string {
	t.Helper()
	dir := fmt.Sprintf("/dev/shm/%s/scr.%d", user, id)
	c.sh(t, "install", "-d", "-o", user, "-g", user, "-m", "0700", "/dev/shm/"+user, dir)
	transfer := dir + "/transfer.scrinfo"
	args := []string{"runuser", "-u", user, "--", "/usr/local/bin/scr-ctl", "stop", "--create", transfer}
	if unfinished {
		c.sh(t, "runuser", "-u", user, "--", "sh", "-c", "echo checkpoint > "+dir+"/ckpt")
		args = []string{"runuser", "-u", user, "--", "/usr/local/bin/scr-ctl", "add", transfer, dir + "/ckpt", "/p/lustre/" + user + "/stale"}
	}
	c.sh(t, args...)
	t.Cleanup(func() { _, _ = c.try("rm", "-rf", dir) })
	return dir
}

// TestSlurmPrologSite: the prolog deployment model under the container's
// real Slurm and systemd, installed as deploy/systemd/README.md says, with
// a User= line in a site drop-in named as the README's (the old example
// had one). Jobs of two users run the shipped prolog-site job script at
// once and ask for a daemon by their --comment (#SBATCH line): each job's
// daemon runs as that job's user, both jobs complete 0:0 with every
// checkpoint flushed, and the epilog stops the unit and reaps the job's
// cache, and an ended job's stale cache, keeping one whose flush is
// unfinished. Then flush-job.sbatch (the srun model's script) on this
// prolog site: its own daemon finds the prolog's serving the file, the
// job uses that one and completes 0:0.
func TestSlurmPrologSite(t *testing.T) {
	testenv.Long(t, "the site prolog and epilog through Slurm jobs")
	t.Parallel()
	c := nspawnContainer(t)
	containerSlurm(t, c)
	// A User= line in the site drop-in as the README installs it (named
	// after it, so that it sorts where the README's does): the job's
	// drop-in must still win.
	readme, err := os.ReadFile("../../deploy/systemd/README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`/etc/systemd/system/scr-transferd@\.service\.d/([^ /]+)\.conf`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("the README installs no site drop-in for the system unit")
	}
	siteUser := "/etc/systemd/system/scr-transferd@.service.d/" + string(m[1]) + "-user.conf"
	conf := filepath.Join(t.TempDir(), "user.conf")
	if err := os.WriteFile(conf, []byte("[Service]\nUser="+unitUser+"\nGroup="+unitUser+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.install(t, conf, siteUser, 0o644)
	t.Cleanup(func() { _, _ = c.try("rm", "-f", siteUser); _, _ = c.try("systemctl", "daemon-reload") })
	c.sh(t, "systemctl", "daemon-reload")

	stale := staleCache(t, c, otherUser, 999901, false)
	kept := staleCache(t, c, otherUser, 999902, true)
	a := submitAs(t, c, unitUser, "../../deploy/slurm/flush-job-prolog.sbatch")
	b := submitAs(t, c, otherUser, "../../deploy/slurm/flush-job-prolog.sbatch")
	a.end()
	b.end()
	a.reaped()
	b.reaped()
	if _, err := os.Stat(c.path(stale)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the epilog left the ended job's complete cache %s (%v)", stale, err)
	}
	if _, err := os.Stat(c.path(kept)); err != nil {
		t.Errorf("the epilog removed a cache whose flush is unfinished, %s: %v", kept, err)
	}
	reap := c.sh(t, "journalctl", "--no-pager", "-o", "cat", "-t", "scr-transferd-reap")
	for _, want := range []string{"job 999901: removed", "job 999902: keeping", "job " + b.id + ": removed"} {
		if !strings.Contains(reap, want) {
			t.Errorf("the reaper's log does not say %q:\n%s", want, lastLines(reap, 20))
		}
	}

	// The srun model's script on a prolog site (asking for the prolog's
	// daemon too): "already served" is no failure.
	s := submitAs(t, c, unitUser, "../../deploy/slurm/flush-job.sbatch", "--comment=scr-transferd")
	s.end()
	if out, _ := os.ReadFile(c.path(s.work + "/job.out")); !strings.Contains(string(out), "already serves") {
		t.Errorf("the job does not say that another daemon serves its transfer file:\n%s", out)
	}
	s.reaped()
}
