package field

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// slurmNodes are the nodes slurm-up.sh configures.
var slurmNodes = []string{"n1", "n2"}

// Generous caps for a loaded 2-core machine; the tests wait for
// conditions, never for a time.
const (
	jobTimeout    = 5 * time.Minute
	lingerTimeout = 90 * time.Second // Slurm's KillWait is 30 s
)

// cluster is the Slurm cluster slurm-up.sh started.
type cluster struct {
	dir string
	env []string
}

// slurmCluster returns the running cluster of SCR_FIELD_SLURM (default
// /run/scr-field/slurm), skipping the test when there is none, or failing
// it under CI.
func slurmCluster(t *testing.T) *cluster {
	t.Helper()
	dir := os.Getenv("SCR_FIELD_SLURM")
	if dir == "" {
		dir = "/run/scr-field/slurm"
	}
	conf := filepath.Join(dir, "slurm.conf")
	if _, err := os.Stat(conf); err != nil {
		testenv.Absent(t, "no Slurm cluster (%v): start one with `sudo test/field/slurm-up.sh` (.ci/run does)", err)
	}
	c := &cluster{dir: dir}
	env := os.Environ()
	env = append(env, "SLURM_CONF="+conf)
	if os.Getenv("USER") == "" { // a login shell always has it; the job scripts use it
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "USER="+u.Username)
	}
	out, err := output(env, "sinfo", "-h", "-N", "-o", "%N %t")
	if err != nil {
		testenv.Absent(t, "the Slurm cluster in %s does not answer: %v", dir, err)
	}
	// A node still completing the job of a test that just ended (state
	// comp, while Slurm ends the job's processes, up to its KillWait)
	// becomes usable by itself: wait for that, not for a node down.
	asked := true // out is sinfo's answer to this poll
	if !testenv.UntilEvery(200*time.Millisecond, lingerTimeout, func() bool {
		if !asked {
			if out, err = output(env, "sinfo", "-h", "-N", "-o", "%N %t"); err != nil {
				t.Fatalf("the Slurm cluster in %s stopped answering: %v", dir, err)
			}
		}
		asked = false
		n := unusableNode(out)
		if n != "" && !regexpLine(out, n+" (comp|completing)") {
			t.Fatalf("node %s is not usable; sinfo says:\n%s\nslurmd log:\n%s", n, out, tail(filepath.Join(dir, "log", "slurmd-"+n+".log"), 20))
		}
		return n == ""
	}) {
		n := unusableNode(out)
		t.Fatalf("node %s is not usable; sinfo says:\n%s\nslurmd log:\n%s", n, out, tail(filepath.Join(dir, "log", "slurmd-"+n+".log"), 20))
	}
	// The commands, built once the cluster answers, where the job scripts
	// look for them.
	c.env = append(env, "PATH="+bins.Need(t)+string(os.PathListSeparator)+os.Getenv("PATH"))
	return c
}

// unusableNode returns the first node of the cluster that sinfo's output
// out does not show ready for a job (idle, mixed or allocated), "" if none.
func unusableNode(out string) string {
	for _, n := range slurmNodes {
		if !regexpLine(out, n+" (idle|mix|alloc)") {
			return n
		}
	}
	return ""
}

// user returns the user the jobs run as (USER in their environment).
func (c *cluster) user() string {
	for i := len(c.env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(c.env[i], "USER="); ok {
			return v
		}
	}
	return ""
}

// nodeRoot returns the path through which this process sees node's file
// system: its slurmd's root, with that node's private /dev/shm.
func (c *cluster) nodeRoot(t *testing.T, node string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "slurmd-"+node+".pid"))
	if err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
	return filepath.Join("/proc", strings.TrimSpace(string(b)), "root")
}

// submit submits script with sbatch from work (the job's working
// directory) with extra environment, and returns the job ID. The job is
// cancelled at the end of the test if it is still there, and its
// node-local directories are removed.
func (c *cluster) submit(t *testing.T, work, script string, env ...string) string {
	t.Helper()
	abs, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	// The scripts ask for 4 nodes of 32 tasks; this cluster has 2 nodes of
	// 2 CPUs. Command-line options override #SBATCH lines.
	out := run(t, append(slices.Clone(c.env), env...), "sbatch", "--parsable",
		"--nodes=2", "--ntasks-per-node=2", "--chdir="+work, "--output="+filepath.Join(work, "job.out"), abs)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job ID", out)
	}
	t.Cleanup(func() {
		if _, err := output(c.env, "scancel", id); err != nil {
			t.Logf("scancel %s: %v", id, err)
		}
		if t.Failed() {
			t.Logf("job %s output:\n%s", id, tail(filepath.Join(work, "job.out"), 60))
			for _, log := range globs(work, "scr-transferd*") {
				t.Logf("%s:\n%s", log, tail(log, 60))
			}
		}
	})
	return id
}

// removeNodeDirs removes the job's directories in each node's /dev/shm
// at the end of the test.
func (c *cluster) removeNodeDirs(t *testing.T, id string) {
	t.Helper()
	for _, n := range slurmNodes {
		dir := filepath.Join(c.nodeRoot(t, n), "dev/shm", c.user(), "scr."+id)
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
}

// job returns the fields of `scontrol show job`.
func (c *cluster) job(t *testing.T, id string) map[string]string {
	t.Helper()
	out := run(t, c.env, "scontrol", "-o", "show", "job", id)
	fields := map[string]string{}
	for _, kv := range strings.Fields(out) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

var endStates = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}

// waitEnd waits until the job has ended and returns its fields.
func (c *cluster) waitEnd(t *testing.T, id string) map[string]string {
	t.Helper()
	var j map[string]string
	if !testenv.UntilEvery(200*time.Millisecond, jobTimeout, func() bool {
		j = c.job(t, id)
		return slices.Contains(endStates, j["JobState"])
	}) {
		t.Fatalf("job %s has not ended after %v: JobState=%s Reason=%s", id, jobTimeout, j["JobState"], j["Reason"])
	}
	return j
}

// jobProc is a live process.
type jobProc struct {
	pid  int
	comm string
	node string // SLURMD_NODENAME of its environment
	job  string // SLURM_JOB_ID of its environment
	cmd  string
}

// readProc reads the process of /proc/PID dir; false if it is gone.
func readProc(dir string) (jobProc, bool) {
	pid, err := strconv.Atoi(filepath.Base(dir))
	if err != nil {
		return jobProc{}, false
	}
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return jobProc{}, false
	}
	comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
	p := jobProc{
		pid:  pid,
		comm: strings.TrimSpace(string(comm)),
		cmd:  strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))),
	}
	environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("SLURM_JOB_ID=")); ok {
			p.job = string(v)
		} else if v, ok := bytes.CutPrefix(kv, []byte("SLURMD_NODENAME=")); ok {
			p.node = string(v)
		}
	}
	return p, true
}

// jobProcs lists the live processes of the host cluster's job id: those
// of the host's PID namespace whose environment carries SLURM_JOB_ID=id,
// and the job's slurmstepd.
func jobProcs(id string) []jobProc {
	self, _ := os.Readlink("/proc/self/ns/pid")
	var procs []jobProc
	for _, p := range procsIn(self) {
		if p.job == id || p.comm == "slurmstepd" && strings.HasPrefix(p.cmd, "slurmstepd: ["+id+".") {
			procs = append(procs, p)
		}
	}
	return procs
}

// daemonWatch records every scr-transferd process of a job, per node, by
// scanning /proc until stopped.
type daemonWatch struct {
	stop, done chan struct{}
	mu         sync.Mutex
	pids       map[string]map[int]string // node -> PID -> command line
}

func watchDaemons(id string) *daemonWatch {
	w := &daemonWatch{stop: make(chan struct{}), done: make(chan struct{}), pids: map[string]map[int]string{}}
	go func() {
		defer close(w.done)
		for {
			for _, p := range jobProcs(id) {
				if p.comm != "scr-transferd" {
					continue
				}
				w.mu.Lock()
				if w.pids[p.node] == nil {
					w.pids[p.node] = map[int]string{}
				}
				w.pids[p.node][p.pid] = p.cmd
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return w
}

// oneEach stops the watch and fails unless exactly one daemon ran on each
// node during the job.
func (w *daemonWatch) oneEach(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range slurmNodes {
		if len(w.pids[n]) != 1 {
			t.Errorf("node %s: %d scr-transferd processes during the job, want exactly 1: %v", n, len(w.pids[n]), w.pids[n])
		}
	}
	for n := range w.pids {
		if !slices.Contains(slurmNodes, n) {
			t.Errorf("scr-transferd on unknown node %q: %v", n, w.pids[n])
		}
	}
}

// nothingLeft waits (bounded) until no process of the job is left.
func nothingLeft(t *testing.T, id string) {
	t.Helper()
	var procs []jobProc
	if !testenv.UntilEvery(200*time.Millisecond, lingerTimeout, func() bool {
		procs = jobProcs(id)
		return len(procs) == 0
	}) {
		var s []string
		for _, p := range procs {
			s = append(s, fmt.Sprintf("%d %s (node %s): %s", p.pid, p.comm, p.node, p.cmd))
		}
		t.Fatalf("job %s ended %v ago but left processes running:\n%s", id, lingerTimeout, strings.Join(s, "\n"))
	}
}

// transferView reads node's transfer file of job id.
func (c *cluster) transferView(t *testing.T, node, id string) (transfer.View, string, error) {
	t.Helper()
	root := c.nodeRoot(t, node)
	path := filepath.Join(root, "dev/shm", c.user(), "scr."+id, "transfer.scrinfo")
	tree, err := hashfile.NewStore(path, hashfile.Flock).Read()
	if err != nil {
		return transfer.View{}, path, err
	}
	return transfer.Read(tree), path, nil
}

// work prepares a job's working directory with the stand-in application
// and returns it with the directories for the destinations and manifests.
func work(t *testing.T) (dir, pfs, out string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	app, err := os.ReadFile("testdata/simulation")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "simulation"), app, 0o755); err != nil {
		t.Fatal(err)
	}
	pfs, out = filepath.Join(dir, "pfs"), filepath.Join(dir, "out")
	for _, d := range []string{pfs, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, pfs, out
}

// TestSlurmFlushJob submits deploy/slurm/flush-job.sbatch with a stand-in
// application that hands three checkpoints per task to the daemons: the
// job completes 0:0 with exactly one daemon per node, every checkpoint
// arrives byte for byte, and nothing of the job is left running; its last
// step reaps an earlier job's cache on every node and keeps one not
// flushed.
func TestSlurmFlushJob(t *testing.T) {
	t.Parallel()
	c := slurmCluster(t)
	dir, pfs, out := work(t)
	const ckpts = 3
	// On every node, the caches of two earlier jobs Slurm has forgotten:
	// the job's last step (scr-transferd-reap) removes the one with
	// nothing left to flush and keeps the one not flushed.
	var stale, kept []string
	for _, n := range slurmNodes {
		stale = append(stale, c.staleCache(t, n, 999921, false))
		kept = append(kept, c.staleCache(t, n, 999922, true))
	}
	id := c.submit(t, dir, "../../deploy/slurm/flush-job.sbatch",
		"FIELD_PFS="+pfs, "FIELD_OUT="+out, "FIELD_CKPTS="+strconv.Itoa(ckpts), "FIELD_KB=300")
	c.removeNodeDirs(t, id)
	w := watchDaemons(id)
	j := c.waitEnd(t, id)
	w.oneEach(t)
	if j["JobState"] != "COMPLETED" || j["ExitCode"] != "0:0" {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want COMPLETED 0:0", id, j["JobState"], j["ExitCode"])
	}
	nothingLeft(t, id)
	entries := readManifests(t, out)
	if want := len(slurmNodes) * 2 * ckpts * 2; len(entries) != want {
		t.Fatalf("the application handed over %d files, want %d", len(entries), want)
	}
	sameBytes(t, entries)
	// Everything arrived: the job script removes the node-local cache and
	// control directory on every node.
	for _, n := range slurmNodes {
		dir := filepath.Join(c.nodeRoot(t, n), "dev/shm", c.user(), "scr."+id)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node %s: the job's cache and control directory %s is still there (%v)", n, dir, err)
		}
	}
	for i := range stale {
		if _, err := os.Stat(stale[i]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the ended job's complete cache %s is still there (%v)", stale[i], err)
		}
		if _, err := os.Stat(kept[i]); err != nil {
			t.Errorf("a cache whose flush is unfinished was removed, %s: %v", kept[i], err)
		}
	}
	jobOut, _ := os.ReadFile(filepath.Join(dir, "job.out"))
	// Every node's reaper says it keeps the unflushed cache. The complete
	// one is checked above by its absence only: another job's reaper,
	// running meanwhile on the same node, may have removed it first (what
	// a reaper says of what it removes is deploy's TestReapCaches).
	for _, want := range []string{"job 999922: keeping"} {
		if got := strings.Count(string(jobOut), want); got != len(slurmNodes) {
			t.Errorf("the job's output says %q %d times, want once per node:\n%s", want, got, jobOut)
		}
	}
}

// staleCache plants, in node's /dev/shm, the cache of an earlier job id of
// the jobs' user that Slurm has forgotten, with a complete flush or one
// file not flushed, and returns its path as this process sees it.
func (c *cluster) staleCache(t *testing.T, node string, id int, unfinished bool) string {
	t.Helper()
	dir := filepath.Join(c.nodeRoot(t, node), "dev/shm", c.user(), "scr."+strconv.Itoa(id))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	transfer := filepath.Join(dir, "transfer.scrinfo")
	args := []string{"stop", "--create", transfer}
	if unfinished {
		src := filepath.Join(dir, "ckpt")
		if err := os.WriteFile(src, []byte("checkpoint"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = []string{"add", transfer, src, filepath.Join(t.TempDir(), "stale")}
	}
	run(t, c.env, bins.Path(t, testenv.Ctl), args...)
	return dir
}

// TestSlurmApplicationFails: an application that exits non-zero after
// handing over its checkpoints still gets them flushed, and the job
// reports the application's exit status.
func TestSlurmApplicationFails(t *testing.T) {
	testenv.Long(t, "a Slurm job whose application fails")
	t.Parallel()
	c := slurmCluster(t)
	dir, pfs, out := work(t)
	// 1 MiB/s: the flush is still running when the application exits.
	id := c.submit(t, dir, "../../deploy/slurm/flush-job.sbatch",
		"FIELD_PFS="+pfs, "FIELD_OUT="+out, "FIELD_CKPTS=2", "FIELD_KB=500", "FIELD_BW=1M", "FIELD_APP_EXIT=3")
	c.removeNodeDirs(t, id)
	w := watchDaemons(id)
	j := c.waitEnd(t, id)
	w.oneEach(t)
	if j["JobState"] != "FAILED" || j["ExitCode"] != "3:0" {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want FAILED 3:0 (the application's status)", id, j["JobState"], j["ExitCode"])
	}
	nothingLeft(t, id)
	entries := readManifests(t, out)
	if want := len(slurmNodes) * 2 * 2 * 2; len(entries) != want {
		t.Fatalf("the application handed over %d files, want %d", len(entries), want)
	}
	sameBytes(t, entries)
}

// TestSlurmCancelMidFlush: scancel while the daemons copy leaves every
// node's transfer file consistent: WRITTEN never exceeds the bytes of the
// copy that equal the source, and a file recorded complete is the
// source's bytes at its destination. Nothing of the job is left running.
func TestSlurmCancelMidFlush(t *testing.T) {
	testenv.Long(t, "a Slurm job cancelled mid-flush")
	t.Parallel()
	c := slurmCluster(t)
	dir, pfs, out := work(t)
	// 4 files of 4 MiB per node at 512 KiB/s: about 30 s of copying.
	id := c.submit(t, dir, "../../deploy/slurm/flush-job.sbatch",
		"FIELD_PFS="+pfs, "FIELD_OUT="+out, "FIELD_CKPTS=1", "FIELD_KB=4096", "FIELD_BW=512K")
	c.removeNodeDirs(t, id)

	// Wait until some node has durable bytes of a file it has not finished.
	if !testenv.UntilEvery(20*time.Millisecond, jobTimeout, func() bool {
		mid := false
		for _, n := range slurmNodes {
			v, _, err := c.transferView(t, n, id)
			if err != nil {
				continue // not created yet
			}
			for _, f := range v.Files {
				if f.Written > 0 && f.Written < f.Size {
					mid = true
				}
			}
		}
		if j := c.job(t, id); slices.Contains(endStates, j["JobState"]) {
			t.Fatalf("job %s ended (%s %s) before any file was partly flushed", id, j["JobState"], j["ExitCode"])
		}
		return mid
	}) {
		t.Fatalf("no file partly flushed after %v", jobTimeout)
	}
	run(t, c.env, "scancel", id)
	j := c.waitEnd(t, id)
	if j["JobState"] != "CANCELLED" {
		t.Errorf("job %s: JobState=%s, want CANCELLED", id, j["JobState"])
	}
	nothingLeft(t, id)

	for _, n := range slurmNodes {
		root := c.nodeRoot(t, n)
		v, path, err := c.transferView(t, n, id)
		if err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		t.Logf("node %s: STATE %q after scancel", n, v.State)
		for _, f := range v.Files {
			src, err := os.ReadFile(filepath.Join(root, f.Src))
			if err != nil {
				t.Fatalf("node %s: source of %s: %v", n, path, err)
			}
			match, err := matchingPrefix(f.Dest, src)
			if err != nil {
				t.Fatal(err)
			}
			if f.Written > match {
				t.Errorf("node %s: %s: WRITTEN %d but only %d bytes of the copy equal the source", n, f.Src, f.Written, match)
			}
			if f.Written == f.Size {
				if got, err := os.ReadFile(f.Dest); err != nil || !bytes.Equal(got, src) {
					t.Errorf("node %s: %s recorded complete but %s is not its bytes (%v)", n, f.Src, f.Dest, err)
				}
			}
		}
	}
}

// matchingPrefix returns how many leading bytes of the copy of a file equal
// its source: the partial copy's or the final file's, whichever is longer.
func matchingPrefix(dest string, src []byte) (int64, error) {
	var best int64
	for _, p := range []string{flush.TempPath(dest), dest} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n := 0
		for n < len(b) && n < len(src) && b[n] == src[n] {
			n++
		}
		best = max(best, int64(n))
	}
	return best, nil
}

// regexpLine reports whether some line of s matches pattern entirely.
func regexpLine(s, pattern string) bool {
	re := regexp.MustCompile("^" + pattern + "$")
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(strings.TrimSpace(l)) {
			return true
		}
	}
	return false
}

// tail returns the last n lines of a file, or why it cannot.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// globs returns the files matching pattern in dir, sorted.
func globs(dir, pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	sort.Strings(m)
	return m
}

// TestSlurmFlushJobToGluster submits deploy/slurm/flush-job.sbatch with
// GlusterFS as the parallel file system: both nodes' daemons flush into one
// dataset directory on a FUSE client mount of a real distributed file
// system (no O_TMPFILE, no syncfs there: the fallbacks run), the job
// completes 0:0 and every checkpoint arrives byte for byte.
func TestSlurmFlushJobToGluster(t *testing.T) {
	testenv.Long(t, "a Slurm job flushing to GlusterFS")
	t.Parallel()
	c := slurmCluster(t)
	root := os.Getenv("SCR_GLUSTER")
	if root == "" {
		testenv.Absent(t, "SCR_GLUSTER is not set: bring GlusterFS up with test/gluster/up.sh before test/field/slurm-up.sh")
	}
	dir, _, out := work(t)
	pfs, err := os.MkdirTemp(filepath.Join(root, "field"), "slurm-")
	if err != nil {
		t.Fatalf("the GlusterFS mount for field jobs: %v (test/gluster/up.sh makes it)", err)
	}
	t.Cleanup(func() { os.RemoveAll(pfs) })
	if err := os.Chmod(pfs, 0o777); err != nil {
		t.Fatal(err)
	}
	const ckpts = 2
	id := c.submit(t, dir, "../../deploy/slurm/flush-job.sbatch",
		"FIELD_PFS="+pfs, "FIELD_OUT="+out, "FIELD_CKPTS="+strconv.Itoa(ckpts), "FIELD_KB=300")
	c.removeNodeDirs(t, id)
	j := c.waitEnd(t, id)
	if j["JobState"] != "COMPLETED" || j["ExitCode"] != "0:0" {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want COMPLETED 0:0", id, j["JobState"], j["ExitCode"])
	}
	nothingLeft(t, id)
	entries := readManifests(t, out)
	if want := len(slurmNodes) * 2 * ckpts * 2; len(entries) != want {
		t.Fatalf("the application handed over %d files, want %d", len(entries), want)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.dest, pfs+"/") {
			t.Fatalf("a checkpoint went to %s, not beneath the GlusterFS mount %s", e.dest, pfs)
		}
	}
	sameBytes(t, entries)
}
