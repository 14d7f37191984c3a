package field

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// The users the units run as in the container: a job's user, written
// into each instance's 90-job.conf as the prolog does, and a second one.
const (
	unitUser  = "alice"
	otherUser = "bob"
)

// Generous caps for a loaded machine. The watchdog needs WatchdogSec=60s
// plus RestartSec=5s of the shipped unit.
const (
	unitTimeout     = 2 * time.Minute
	watchdogTimeout = 4 * time.Minute
)

// container is the Debian system nspawn-up.sh booted.
type container struct {
	dir    string
	leader string // the container's PID 1, as the host numbers it
}

// nspawnContainer returns the running container of SCR_FIELD_NSPAWN
// (default /var/tmp/scr-field/nspawn), skipping the test when there is
// none, or failing it under CI.
func nspawnContainer(t *testing.T) *container {
	t.Helper()
	dir := os.Getenv("SCR_FIELD_NSPAWN")
	if dir == "" {
		dir = "/var/tmp/scr-field/nspawn"
	}
	b, err := os.ReadFile(filepath.Join(dir, "leader.pid"))
	if err != nil {
		testenv.Absent(t, "no systemd-nspawn container (%v): boot one with `sudo test/field/nspawn-up.sh` (.ci/run does)", err)
	}
	c := &container{dir: dir, leader: strings.TrimSpace(string(b))}
	if comm, err := os.ReadFile(filepath.Join("/proc", c.leader, "comm")); err != nil || strings.TrimSpace(string(comm)) != "systemd" {
		testenv.Absent(t, "the container's PID 1 (host PID %s, from %s) is not running systemd (%v); console:\n%s",
			c.leader, dir, err, tail(filepath.Join(dir, "console.log"), 30))
	}
	if state, err := c.try("systemctl", "is-system-running"); err != nil && strings.TrimSpace(state) != "degraded" {
		t.Fatalf("the container's systemd is not running: %v", err)
	}
	return c
}

// try runs a command in the container (all its namespaces).
func (c *container) try(args ...string) (string, error) {
	return output(nil, "nsenter", append([]string{"-t", c.leader, "-a", "--"}, args...)...)
}

// sh runs a command in the container, failing the test if it fails.
func (c *container) sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.try(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// path returns how the host reaches path inside the container.
func (c *container) path(p string) string { return filepath.Join("/proc", c.leader, "root", p) }

// install copies a host file into the container with mode perm, creating
// its directory, as `install -D` does.
func (c *container) install(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := c.path(dst)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	// A new file replaces a running binary without "text file busy", and
	// concurrent installs of the same file do not meet halfway.
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		t.Fatal(err)
	}
}

// show returns properties of a unit.
func (c *container) show(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	out := c.sh(t, "systemctl", "show", "--property="+strings.Join(props, ","), unit)
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// journal returns the unit's journal since the container booted.
func (c *container) journal(t *testing.T, unit string) string {
	t.Helper()
	return c.sh(t, "journalctl", "--no-pager", "-o", "cat", "-u", unit)
}

// installMu makes the tests that install the units, in parallel, do it
// one at a time.
var installMu sync.Mutex

// unitJob is one instance of the system unit in the container, for one
// transfer file.
type unitJob struct {
	t                 *testing.T
	c                 *container
	unit              string
	cntl, cache, dest string // paths in the container
	transfer          string
	uid, gid          int
	store             *hashfile.Store   // the transfer file, from the host
	sources           map[string][]byte // source path -> its bytes
	lastWritten       map[string]int64  // highest WRITTEN seen per source
}

// installUnits installs the daemon and the system unit in the container as
// deploy/systemd/README.md says, with the site drop-in (10-site.conf) and
// the environment file exactly as shipped (--allow-src=/dev/shm
// --allow-dest=/p/lustre), the cache reaper, and the users alice and bob.
func installUnits(t *testing.T, c *container) {
	t.Helper()
	installMu.Lock() // tests in parallel: one useradd
	defer installMu.Unlock()
	bin := plainBins.Need(t)
	c.install(t, filepath.Join(bin, "scr-transferd"), "/usr/local/bin/scr-transferd", 0o755)
	c.install(t, filepath.Join(bin, "scr-ctl"), "/usr/local/bin/scr-ctl", 0o755)
	c.install(t, "../../deploy/systemd/scr-transferd@.service", "/etc/systemd/system/scr-transferd@.service", 0o644)
	// The earlier README installed the site drop-in as site.conf, with a
	// User= line: it sorts after the prolog's 90-job.conf. An upgrade
	// renames it (deploy/systemd/README.md, "Upgrading").
	c.sh(t, "rm", "-f", "/etc/systemd/system/scr-transferd@.service.d/site.conf")
	c.install(t, "../../deploy/systemd/site.conf.example", "/etc/systemd/system/scr-transferd@.service.d/10-site.conf", 0o644)
	c.install(t, "../../deploy/slurm/reap-caches.sh", "/usr/local/bin/scr-transferd-reap", 0o755)
	c.install(t, "../../deploy/systemd/scr-transferd.env.example", "/etc/scr-transferd/scr-transferd.env", 0o644)
	c.install(t, "../../deploy/systemd/scr-transferd.sysusers.example", "/etc/sysusers.d/scr-transferd.conf", 0o644)
	c.sh(t, "systemd-sysusers", "/etc/sysusers.d/scr-transferd.conf")
	c.install(t, "../../deploy/systemd/scr-transferd.tmpfiles.example", "/etc/tmpfiles.d/scr-transferd.conf", 0o644)
	c.sh(t, "systemd-tmpfiles", "--create", "/etc/tmpfiles.d/scr-transferd.conf")
	// The caches are in /dev/shm: logind must not remove the user's files
	// there when the user's last session (here: runuser's) ends.
	if conf, err := os.ReadFile(c.path("/etc/systemd/logind.conf")); err != nil || !regexpLine(string(conf), "RemoveIPC=no") {
		c.sh(t, "sed", "-i", "-e", "s/^#*RemoveIPC=.*/RemoveIPC=no/", "/etc/systemd/logind.conf")
		c.sh(t, "systemctl", "restart", "systemd-logind")
	}
	for _, u := range []string{unitUser, otherUser} {
		c.sh(t, "sh", "-c", "id "+u+" >/dev/null 2>&1 || useradd --create-home "+u)
		c.sh(t, "install", "-d", "-o", u, "-g", u, "-m", "0755", "/p/lustre/"+u)
	}
	c.sh(t, "systemctl", "daemon-reload")
}

// newUnitJob prepares a job's control directory and cache in the
// container's /dev/shm, as SCR and a prolog make them, and the instance's
// 90-job.conf naming the job's user, as the prolog writes it, and returns
// its unit. The unit is stopped and the job's files removed at the end.
// Its "job ID" is not a number: no Slurm job has it, and the cache reaper
// (which only looks at scr.<number>) leaves it alone.
func newUnitJob(t *testing.T, c *container) *unitJob {
	t.Helper()
	id := "t" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	j := &unitJob{
		t: t, c: c,
		cntl:        "/dev/shm/" + unitUser + "/scr." + id,
		dest:        "/p/lustre/" + unitUser + "/job." + id,
		sources:     map[string][]byte{},
		lastWritten: map[string]int64{},
	}
	j.cache = j.cntl + "/cache"
	j.transfer = j.cntl + "/transfer.scrinfo"
	var err error
	if j.uid, err = strconv.Atoi(strings.TrimSpace(c.sh(t, "id", "-u", unitUser))); err != nil {
		t.Fatal(err)
	}
	if j.gid, err = strconv.Atoi(strings.TrimSpace(c.sh(t, "id", "-g", unitUser))); err != nil {
		t.Fatal(err)
	}
	c.sh(t, "install", "-d", "-o", unitUser, "-g", unitUser, "-m", "0700", "/dev/shm/"+unitUser, j.cntl, j.cache)
	c.sh(t, "install", "-d", "-o", unitUser, "-g", unitUser, "-m", "0755", j.dest)
	j.unit = "scr-transferd@" + strings.TrimSpace(c.sh(t, "systemd-escape", "--path", j.transfer)) + ".service"
	j.store = hashfile.NewStore(c.path(j.transfer), hashfile.Flock)
	dropin := "/run/systemd/system/" + j.unit + ".d/90-job.conf"
	conf := filepath.Join(t.TempDir(), "90-job.conf")
	if err := os.WriteFile(conf, []byte("[Service]\nUser="+unitUser+"\nGroup="+unitUser+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.install(t, conf, dropin, 0o644)
	t.Cleanup(func() {
		if t.Failed() {
			if out, err := c.try("systemctl", "status", "--no-pager", "--lines=0", j.unit); err == nil || out != "" {
				t.Logf("systemctl status:\n%s", out)
			}
			if out, err := c.try("journalctl", "--no-pager", "-o", "short-precise", "-u", j.unit); err == nil {
				t.Logf("journal of %s:\n%s", j.unit, lastLines(out, 80))
			}
		}
		_, _ = c.try("systemctl", "stop", j.unit)
		_, _ = c.try("systemctl", "reset-failed", j.unit)
		_, _ = c.try("rm", "-rf", j.cntl, j.dest, filepath.Dir(dropin))
	})
	return j
}

// scrCtl runs scr-ctl in the container as the job's user, as the library
// (in the user's application) would edit the transfer file.
func (j *unitJob) scrCtl(args ...string) string {
	j.t.Helper()
	return j.c.sh(j.t, append([]string{"runuser", "-u", unitUser, "--", "/usr/local/bin/scr-ctl"}, args...)...)
}

// checkpoint writes size random bytes as a cache file of the user's and
// adds it to the transfer file; it returns the source path.
func (j *unitJob) checkpoint(name string, size int) string {
	j.t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		j.t.Fatal(err)
	}
	src := j.cache + "/" + name
	p := j.c.path(src)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		j.t.Fatal(err)
	}
	if err := os.Chown(p, j.uid, j.gid); err != nil {
		j.t.Fatal(err)
	}
	j.sources[src] = data
	j.scrCtl("add", j.transfer, src, j.dest+"/"+name)
	return src
}

// view reads the transfer file from the host, under its lock.
func (j *unitJob) view() transfer.View {
	j.t.Helper()
	tree, err := j.store.Read()
	if err != nil {
		j.t.Fatal(err)
	}
	return transfer.Read(tree)
}

// waitView polls the transfer file until cond holds. It also fails as soon
// as any file's WRITTEN goes back: a restarted daemon resumes from it.
func (j *unitJob) waitView(what string, timeout time.Duration, cond func(v transfer.View) bool) transfer.View {
	j.t.Helper()
	var v transfer.View
	if !testenv.UntilEvery(20*time.Millisecond, timeout, func() bool {
		tree, err := j.store.Read()
		if err != nil {
			return false
		}
		v = transfer.Read(tree)
		for _, f := range v.Files {
			if f.Written < j.lastWritten[f.Src] {
				j.t.Fatalf("%s: WRITTEN went back from %d to %d", f.Src, j.lastWritten[f.Src], f.Written)
			}
			j.lastWritten[f.Src] = f.Written
		}
		return cond(v)
	}) {
		tree, err := j.store.Read()
		j.t.Fatalf("timed out after %v waiting for %s; transfer file (%v):\n%s", timeout, what, err, hashfile.Format(tree, 2))
	}
	return v
}

// file returns the transfer file's entry of src.
func file(v transfer.View, src string) transfer.File {
	for _, f := range v.Files {
		if f.Src == src {
			return f
		}
	}
	return transfer.File{}
}

// arrived fails unless src's destination holds exactly its bytes.
func (j *unitJob) arrived(src string) {
	j.t.Helper()
	dest := j.dest + "/" + filepath.Base(src)
	got, err := os.ReadFile(j.c.path(dest))
	if err != nil {
		j.t.Fatalf("%s not flushed: %v", src, err)
	}
	if !bytes.Equal(got, j.sources[src]) {
		j.t.Fatalf("%s differs from its source %s (%d vs %d bytes)", dest, src, len(got), len(j.sources[src]))
	}
}

// durable fails unless every file's WRITTEN is covered by bytes of its
// copy that equal the source.
func (j *unitJob) durable(v transfer.View) {
	j.t.Helper()
	for _, f := range v.Files {
		src, ok := j.sources[f.Src]
		if !ok {
			continue
		}
		match, err := matchingPrefix(j.c.path(f.Dest), src)
		if err != nil {
			j.t.Fatal(err)
		}
		if f.Written > match {
			j.t.Fatalf("%s: WRITTEN %d but only %d bytes of the copy equal the source", f.Src, f.Written, match)
		}
	}
}

// stillThere fails unless the transfer file and every cache file exist:
// nothing may delete them when the unit stops (RemoveIPC=).
func (j *unitJob) stillThere(when string) {
	j.t.Helper()
	for _, p := range append([]string{j.transfer}, keys(j.sources)...) {
		if _, err := os.Stat(j.c.path(p)); err != nil {
			j.t.Fatalf("%s: %s is gone: %v", when, p, err)
		}
	}
}

func keys(m map[string][]byte) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return s
}

// mainPID returns the unit's main process (in the container's numbering),
// failing unless the unit is active and running.
func (j *unitJob) mainPID() string {
	j.t.Helper()
	p := j.c.show(j.t, j.unit, "ActiveState", "SubState", "MainPID")
	if p["ActiveState"] != "active" || p["SubState"] != "running" || p["MainPID"] == "0" {
		j.t.Fatalf("%s is not running: %v", j.unit, p)
	}
	return p["MainPID"]
}

// stop stops the unit: the daemon records STATE EXITING and exits 0, and
// the unit ends without failure.
func (j *unitJob) stop() {
	j.t.Helper()
	j.c.sh(j.t, "systemctl", "stop", j.unit)
	p := j.c.show(j.t, j.unit, "ActiveState", "Result", "ExecMainStatus")
	if p["ActiveState"] != "inactive" || p["Result"] != "success" || p["ExecMainStatus"] != "0" {
		j.t.Fatalf("after systemctl stop: %v, want inactive, success, exit status 0", p)
	}
	if v := j.view(); v.State != transfer.Exiting {
		j.t.Fatalf("after systemctl stop: STATE %q, want EXITING", v.State)
	}
}

// TestSystemdUnit installs the system unit in a Debian 12 container booted
// with systemd-nspawn, as deploy/systemd/README.md says, and runs a real
// flush through it with the shipped site drop-in and environment file
// (--allow-src/--allow-dest on): READY and STATUS reach systemd, the logs
// reach journald, the watchdog restarts a stopped daemon, which resumes
// from WRITTEN, systemctl stop records STATE EXITING and leaves the cache
// and transfer file in place, and a later start resumes from WRITTEN.
func TestSystemdUnit(t *testing.T) {
	testenv.Long(t, "boots the systemd container's unit through a whole flush")
	t.Parallel()
	c := nspawnContainer(t)
	installUnits(t, c)
	j := newUnitJob(t, c)

	// READY=1: systemctl start returns once the daemon has recorded its
	// first STATE; STATUS= reaches systemd.
	c.sh(t, "systemctl", "start", j.unit)
	pid := j.mainPID()
	if v := j.view(); v.State != transfer.Stopped {
		t.Fatalf("systemctl start returned, but the transfer file says STATE %q, want STOPPED", v.State)
	}
	if st := c.show(t, j.unit, "StatusText")["StatusText"]; !strings.HasPrefix(st, "STOPPED") {
		t.Fatalf("StatusText=%q after start, want the daemon's STOPPED status", st)
	}
	cmdline := strings.ReplaceAll(c.sh(t, "cat", "/proc/"+pid+"/cmdline"), "\x00", " ")
	for _, flag := range []string{"--allow-src=/dev/shm", "--allow-dest=/p/lustre"} {
		if !strings.Contains(cmdline, flag) {
			t.Fatalf("the daemon runs without %s: %s", flag, cmdline)
		}
	}
	// Metrics in node_exporter's textfile directory, made writable by the
	// tmpfiles entry.
	prom := "/var/lib/prometheus/node-exporter/" + strings.TrimSuffix(j.unit, ".service") + ".prom"
	var err error
	if !testenv.UntilEvery(50*time.Millisecond, unitTimeout, func() bool { _, err = os.Stat(c.path(prom)); return err == nil }) {
		t.Fatalf("no metrics file after %v: %v", unitTimeout, err)
	}
	if u := strings.TrimSpace(c.sh(t, "stat", "-c", "%U", "/proc/"+pid)); u != unitUser {
		t.Fatalf("the daemon runs as %q, want %s (the instance's 90-job.conf)", u, unitUser)
	}

	// A real flush, confined.
	var first []string
	for i := range 3 {
		first = append(first, j.checkpoint(fmt.Sprintf("ckpt1.%d", i), 300<<10+i))
	}
	j.scrCtl("run", j.transfer)
	j.waitView("the first flush", unitTimeout, func(v transfer.View) bool { return v.Done && !v.HasPending() })
	for _, src := range first {
		j.arrived(src)
	}
	journal := j.c.journal(t, j.unit)
	for _, src := range first {
		if !strings.Contains(journal, j.dest+"/"+filepath.Base(src)) {
			t.Fatalf("the journal never names %s:\n%s", src, lastLines(journal, 40))
		}
	}
	if !strings.Contains(journal, `"level":"info"`) {
		t.Fatalf("no JSON log lines in the journal:\n%s", lastLines(journal, 40))
	}

	// A slow flush: STATUS says RUNNING while it copies.
	j.scrCtl("set", j.transfer, "bw", "256K")
	big := j.checkpoint("ckpt2.big", 8<<20)
	j.scrCtl("run", j.transfer)
	j.waitView("durable bytes of the big file", unitTimeout, func(v transfer.View) bool { return file(v, big).Written > 0 })
	var st string
	if !testenv.UntilEvery(50*time.Millisecond, unitTimeout, func() bool {
		st = c.show(t, j.unit, "StatusText")["StatusText"]
		return strings.HasPrefix(st, "RUNNING")
	}) {
		t.Fatalf("StatusText=%q during the flush, want RUNNING", st)
	}

	// The watchdog: a stopped daemon stops pinging; systemd kills and
	// restarts it, and the new one resumes from WRITTEN.
	restarts := c.show(t, j.unit, "NRestarts")["NRestarts"]
	c.sh(t, "systemctl", "kill", "--kill-whom=main", "--signal=SIGSTOP", j.unit)
	var p map[string]string
	if !testenv.UntilEvery(200*time.Millisecond, watchdogTimeout, func() bool {
		p = c.show(t, j.unit, "ActiveState", "SubState", "MainPID", "NRestarts")
		return p["NRestarts"] != restarts && p["ActiveState"] == "active" && p["SubState"] == "running" && p["MainPID"] != pid && p["MainPID"] != "0"
	}) {
		t.Fatalf("no watchdog restart within %v of SIGSTOP: %v", watchdogTimeout, p)
	}
	newPID := p["MainPID"]
	if journal := j.c.journal(t, j.unit); !strings.Contains(journal, "Watchdog timeout") {
		// systemd's own line is in the unit's journal as well.
		t.Fatalf("the journal does not say why the daemon restarted:\n%s", lastLines(journal, 30))
	}
	before := j.lastWritten[big]
	j.waitView("the restarted daemon's progress", unitTimeout, func(v transfer.View) bool { return file(v, big).Written > before })
	t.Logf("watchdog restart: PID %s -> %s, %s resumed from WRITTEN %d", pid, newPID, big, before)

	// systemctl stop: STATE EXITING, WRITTEN durable, nothing deleted.
	j.stop()
	v := j.view()
	j.durable(v)
	j.stillThere("after systemctl stop")
	stopped := file(v, big).Written
	if stopped >= file(v, big).Size {
		t.Fatalf("the big file was complete before the stop (WRITTEN %d): the restart below would prove nothing", stopped)
	}

	// A later start resumes from WRITTEN: it never goes back (waitView
	// checks every sample) and the file completes with the source's bytes.
	c.sh(t, "systemctl", "start", j.unit)
	j.mainPID()
	j.waitView("progress after the restart", unitTimeout, func(v transfer.View) bool { return file(v, big).Written > stopped })
	j.scrCtl("set", j.transfer, "bw", "0")
	j.waitView("the big file", unitTimeout, func(v transfer.View) bool { return v.Done && !v.HasPending() })
	j.arrived(big)

	// --allow-dest is in force: a destination outside /p/lustre is refused
	// with an error and nothing is written there.
	escape := "/dev/shm/" + unitUser + "/escaped." + filepath.Base(j.cntl)
	data := []byte("must not leave the cache")
	src := j.cache + "/ckpt3.escape"
	if err := os.WriteFile(j.c.path(src), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(j.c.path(src), j.uid, j.gid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(j.c.path(escape)) })
	j.scrCtl("add", j.transfer, src, escape)
	j.scrCtl("run", j.transfer)
	f := file(j.waitView("the refused destination's error", unitTimeout, func(v transfer.View) bool { return file(v, src).Error != "" }), src)
	if _, err := os.Stat(j.c.path(escape)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a destination outside --allow-dest was written: %s (%v)", escape, err)
	}
	t.Logf("destination outside --allow-dest: ERROR %q", f.Error)

	j.stop()
	j.stillThere("after the last stop")
	if _, err := os.Stat(c.path(prom)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the metrics file %s outlives the daemon (%v)", prom, err)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
