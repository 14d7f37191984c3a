package field

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// The container's one-node Slurm cluster: ports apart from the host
// cluster's (the container shares the host's network).
const containerSlurmConf = `# Written by test/field: one node, the container itself.
ClusterName=scrfieldct
SlurmctldHost=scrfield(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=26817
SlurmdPort=26818
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
KillWait=30
# The prolog deployment model (deploy/slurm/prolog.sh, epilog.sh): a
# system unit for the jobs that ask (--comment=scr-transferd).
Prolog=/etc/slurm/scr-transferd-prolog.sh
Epilog=/etc/slurm/scr-transferd-epilog.sh
PrologFlags=Alloc
NodeName=scrfield NodeAddr=127.0.0.1 CPUs=2 RealMemory=500 State=UNKNOWN
PartitionName=field Nodes=scrfield Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
`

var containerSlurmOnce sync.Mutex

// containerSlurm configures and starts munge, slurmctld and slurmd in the
// container (Debian's packages, installed by nspawn-up.sh) and a user
// manager for unitUser (lingering), and installs the user unit, the prolog
// and the epilog as deploy/systemd/README.md says. It returns the user's
// UID.
func containerSlurm(t *testing.T, c *container) int {
	t.Helper()
	containerSlurmOnce.Lock()
	defer containerSlurmOnce.Unlock()
	if _, err := c.try("sh", "-c", "command -v slurmctld && command -v slurmd && command -v munged"); err != nil {
		testenv.Absent(t, "Slurm is not installed in the container (nspawn-up.sh installs slurm-wlm and munge): %v", err)
	}
	installUnits(t, c)
	c.install(t, "../../deploy/systemd/user/scr-transferd@.service", "/etc/systemd/user/scr-transferd@.service", 0o644)
	c.install(t, "../../deploy/slurm/prolog.sh", "/etc/slurm/scr-transferd-prolog.sh", 0o755)
	c.install(t, "../../deploy/slurm/epilog.sh", "/etc/slurm/scr-transferd-epilog.sh", 0o755)
	// In a systemd-nspawn container /proc/kmsg is a FIFO (nspawn's own),
	// which a user manager cannot mask for ProtectKernelLogs=yes: the unit
	// fails with "Failed to mount .../inaccessible/fifo to
	// /run/systemd/unit-root/proc/kmsg: No such file or directory"
	// (status=226/NAMESPACE). On a node that is not a container /proc/kmsg
	// is a regular file. This drop-in is the only change to the unit here.
	kmsg := filepath.Join(t.TempDir(), "nspawn.conf")
	if err := os.WriteFile(kmsg, []byte("[Service]\nProtectKernelLogs=no\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.install(t, kmsg, "/etc/systemd/user/scr-transferd@.service.d/nspawn.conf", 0o644)
	uid, err := strconv.Atoi(strings.TrimSpace(c.sh(t, "id", "-u", unitUser)))
	if err != nil {
		t.Fatal(err)
	}

	// The user manager, by lingering (no pam_systemd in slurmd's PAM here).
	c.sh(t, "loginctl", "enable-linger", unitUser)
	sock := fmt.Sprintf("/run/user/%d/systemd/private", uid)
	if !testenv.UntilEvery(100*time.Millisecond, unitTimeout, func() bool { _, err := os.Stat(c.path(sock)); return err == nil }) {
		t.Fatalf("no user manager for %s after %v (%s missing): %s", unitUser, unitTimeout, sock,
			lastLines(c.sh(t, "journalctl", "--no-pager", "-n", "30"), 30))
	}
	c.sh(t, "runuser", "-u", unitUser, "--", "env", fmt.Sprintf("XDG_RUNTIME_DIR=/run/user/%d", uid), "systemctl", "--user", "daemon-reload")

	// Slurm, if not already up with this configuration.
	conf := c.path("/etc/slurm/slurm.conf")
	if old, err := os.ReadFile(conf); err != nil || string(old) != containerSlurmConf {
		if err := os.WriteFile(conf, []byte(containerSlurmConf), 0o644); err != nil {
			t.Fatal(err)
		}
		c.sh(t, "install", "-d", "/var/lib/slurm/slurmctld", "/var/lib/slurm/slurmd", "/var/log/slurm")
		c.sh(t, "systemctl", "restart", "munge")
		c.sh(t, "systemctl", "restart", "slurmctld")
		c.sh(t, "systemctl", "restart", "slurmd")
	}
	var out string
	if !testenv.UntilEvery(200*time.Millisecond, unitTimeout, func() bool {
		out, _ = c.try("sinfo", "-h", "-N", "-o", "%N %t")
		return regexpLine(out, "scrfield (idle|mix|alloc)")
	}) {
		log, _ := c.try("tail", "-n", "20", "/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log")
		t.Fatalf("the container's Slurm node is not up after %v; sinfo: %q\n%s", unitTimeout, out, log)
	}
	return uid
}

// containerJob is a job submitted in the container by unitUser.
type containerJob struct {
	t       *testing.T
	c       *container
	id      string
	work    string // the job's directory in the container
	uid     int
	unit    string
	pidNS   string
	daemons map[int]string
	mu      sync.Mutex
	stop    chan struct{}
	done    chan struct{}
}

// submitInContainer submits script from a fresh work directory in the
// user's home, as the user, with the stand-in application.
func submitInContainer(t *testing.T, c *container, uid int, script string, env ...string) *containerJob {
	t.Helper()
	work := fmt.Sprintf("/home/%s/job.%d", unitUser, time.Now().UnixNano()%1e9)
	c.sh(t, "install", "-d", "-o", unitUser, "-g", unitUser, "-m", "0755", work, work+"/pfs", work+"/out")
	c.install(t, "testdata/simulation", work+"/simulation", 0o755)
	c.install(t, script, work+"/job.sbatch", 0o644)
	c.sh(t, "chown", unitUser+":", work+"/simulation", work+"/job.sbatch")
	args := []string{"runuser", "-u", unitUser, "--", "env", "FIELD_PFS=" + work + "/pfs", "FIELD_OUT=" + work + "/out"}
	args = append(args, env...)
	args = append(args, "sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--chdir="+work, "--output="+work+"/job.out", work+"/job.sbatch")
	out := c.sh(t, args...)
	id := strings.TrimSpace(out)
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job ID", out)
	}
	pidNS, err := os.Readlink(filepath.Join("/proc", c.leader, "ns/pid"))
	if err != nil {
		t.Fatal(err)
	}
	transfer := fmt.Sprintf("/dev/shm/%s/scr.%s/transfer.scrinfo", unitUser, id)
	j := &containerJob{t: t, c: c, id: id, work: work, uid: uid, pidNS: pidNS,
		unit:    "scr-transferd@" + strings.TrimSpace(c.sh(t, "systemd-escape", "--path", transfer)) + ".service",
		daemons: map[int]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("job %s output:\n%s", id, tail(c.path(work+"/job.out"), 60))
			if out, err := c.try("journalctl", "--no-pager", "-o", "short-precise", "_SYSTEMD_USER_UNIT="+j.unit); err == nil {
				t.Logf("journal of the user unit %s:\n%s", j.unit, lastLines(out, 60))
			}
		}
		_, _ = c.try("scancel", id)
		_, _ = j.userctl("stop", j.unit)
		_, _ = c.try("rm", "-rf", work, filepath.Dir(transfer))
	})
	// Every scr-transferd serving this job's transfer file, over the job.
	go func() {
		defer close(j.done)
		for {
			for _, p := range procsIn(pidNS) {
				if p.comm == "scr-transferd" && strings.Contains(p.cmd, transfer) {
					j.mu.Lock()
					j.daemons[p.pid] = p.cmd
					j.mu.Unlock()
				}
			}
			select {
			case <-j.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return j
}

// userctl runs systemctl --user as the job's user.
func (j *containerJob) userctl(args ...string) (string, error) {
	return j.c.try(append([]string{"runuser", "-u", unitUser, "--", "env",
		fmt.Sprintf("XDG_RUNTIME_DIR=/run/user/%d", j.uid), "systemctl", "--user"}, args...)...)
}

// waitEnd waits for the job's end and returns its fields.
func (j *containerJob) waitEnd() map[string]string {
	j.t.Helper()
	var (
		out    string
		fields map[string]string
	)
	if !testenv.UntilEvery(200*time.Millisecond, jobTimeout, func() bool {
		out = j.c.sh(j.t, "scontrol", "-o", "show", "job", j.id)
		fields = map[string]string{}
		for _, kv := range strings.Fields(out) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				fields[k] = v
			}
		}
		return slices.Contains(endStates, fields["JobState"])
	}) {
		j.t.Fatalf("job %s has not ended after %v: %s", j.id, jobTimeout, out)
	}
	return fields
}

// oneDaemon stops the watch and fails unless exactly one daemon served the
// job's transfer file.
func (j *containerJob) oneDaemon() {
	j.t.Helper()
	close(j.stop)
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.daemons) != 1 {
		j.t.Errorf("%d scr-transferd processes served the job, want exactly 1: %v", len(j.daemons), j.daemons)
	}
}

// nothingLeft waits (bounded) until the user unit is inactive and no
// process of the job is left in the container.
func (j *containerJob) nothingLeft() {
	j.t.Helper()
	var (
		state string
		left  []string
	)
	if !testenv.UntilEvery(200*time.Millisecond, lingerTimeout, func() bool {
		state, _ = j.userctl("show", "--property=ActiveState", "--value", j.unit)
		left = nil
		for _, p := range procsIn(j.pidNS) {
			if p.job == j.id || p.comm == "scr-transferd" && strings.Contains(p.cmd, "/scr."+j.id+"/") ||
				p.comm == "slurmstepd" && strings.HasPrefix(p.cmd, "slurmstepd: ["+j.id+".") {
				left = append(left, fmt.Sprintf("%d %s: %s", p.pid, p.comm, p.cmd))
			}
		}
		state = strings.TrimSpace(state)
		return len(left) == 0 && state == "inactive"
	}) {
		j.t.Fatalf("job %s ended %v ago; user unit %s is %q; processes left:\n%s", j.id, lingerTimeout, j.unit, state, strings.Join(left, "\n"))
	}
}

// procsIn lists the live processes in the PID namespace pidNS with the
// SLURM_JOB_ID of their environment.
func procsIn(pidNS string) []jobProc {
	entries, _ := os.ReadDir("/proc")
	var procs []jobProc
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if ns, err := os.Readlink(filepath.Join(dir, "ns/pid")); err != nil || ns != pidNS {
			continue
		}
		if p, ok := readProc(dir); ok {
			procs = append(procs, p)
		}
	}
	return procs
}

// TestSlurmSystemdJob runs deploy/slurm/flush-job-systemd.sbatch in the
// container, whose Slurm node runs the daemon as the user's own unit
// (deploy/systemd/user/scr-transferd@.service) under a user manager kept
// by lingering, without pam_systemd: the job completes 0:0 with exactly one
// daemon, every checkpoint arrives byte for byte, and afterwards the unit
// is stopped and nothing of the job is left running; the unit's stop hook
// reaps the cache of an earlier, ended job and keeps one not flushed.
func TestSlurmSystemdJob(t *testing.T) {
	testenv.Long(t, "a Slurm job running the daemon as a user unit")
	t.Parallel()
	c := nspawnContainer(t)
	uid := containerSlurm(t, c)
	const ckpts = 2
	// Caches of the user's earlier jobs, which Slurm has forgotten: the
	// unit's stop hook (ExecStopPost=scr-transferd-reap) removes the one
	// with nothing left to flush and keeps the other.
	stale := staleCache(t, c, unitUser, 999911, false)
	kept := staleCache(t, c, unitUser, 999912, true)
	j := submitInContainer(t, c, uid, "../../deploy/slurm/flush-job-systemd.sbatch",
		"FIELD_CKPTS="+strconv.Itoa(ckpts), "FIELD_KB=300")
	f := j.waitEnd()
	j.oneDaemon()
	if f["JobState"] != "COMPLETED" || f["ExitCode"] != "0:0" {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want COMPLETED 0:0", j.id, f["JobState"], f["ExitCode"])
	}
	j.nothingLeft()
	entries := readManifests(t, c.path(j.work+"/out"))
	if want := 2 * ckpts * 2; len(entries) != want {
		t.Fatalf("the application handed over %d files, want %d", len(entries), want)
	}
	for i := range entries {
		entries[i].dest = c.path(entries[i].dest)
	}
	sameBytes(t, entries)
	if _, err := os.Stat(c.path(fmt.Sprintf("/dev/shm/%s/scr.%s", unitUser, j.id))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the job's cache and control directory is still there (%v)", err)
	}
	if _, err := os.Stat(c.path(stale)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ended job's complete cache %s is still there (%v)", stale, err)
	}
	if _, err := os.Stat(c.path(kept)); err != nil {
		t.Errorf("a cache whose flush is unfinished was removed, %s: %v", kept, err)
	}
	// The stop hook did it (the epilog reaps too, after the job): the
	// reaper's line is in the user unit's journal.
	journal := c.sh(t, "journalctl", "--no-pager", "-o", "cat", "_SYSTEMD_USER_UNIT="+j.unit)
	for _, want := range []string{"job 999911: removed", "job 999912: keeping"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the user unit's journal does not say %q:\n%s", want, lastLines(journal, 20))
		}
	}
}

// TestSlurmSystemdJobCancelled: scancel while the user unit's daemon copies
// stops the unit (it lives outside the job's processes, so Slurm alone
// would leave it running), the job reads as cancelled (0:15), and nothing
// of the job is left running.
func TestSlurmSystemdJobCancelled(t *testing.T) {
	testenv.Long(t, "a cancelled Slurm job running the daemon as a user unit")
	t.Parallel()
	c := nspawnContainer(t)
	uid := containerSlurm(t, c)
	j := submitInContainer(t, c, uid, "../../deploy/slurm/flush-job-systemd.sbatch",
		"FIELD_CKPTS=1", "FIELD_KB=4096", "FIELD_BW=256K")
	if !testenv.UntilEvery(50*time.Millisecond, jobTimeout, func() bool {
		state, _ := j.userctl("show", "--property=StatusText", "--value", j.unit)
		return strings.HasPrefix(state, "RUNNING")
	}) {
		t.Fatalf("the user unit %s never reported RUNNING", j.unit)
	}
	c.sh(t, "scancel", j.id)
	f := j.waitEnd()
	j.oneDaemon()
	// The script ends by the signal Slurm sent: 0:15, not an exit status
	// of its own (143:0).
	if f["JobState"] != "CANCELLED" || f["ExitCode"] != "0:15" {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want CANCELLED 0:15", j.id, f["JobState"], f["ExitCode"])
	}
	j.nothingLeft()
}
