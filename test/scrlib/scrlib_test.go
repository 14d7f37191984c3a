// Package scrlib drives the daemon with the real SCR 1.2.2 library, in its
// FLOCK and FCNTL builds, through the project's own MPI application
// (app/app.c): flushes, restart from the file system, kill -9 of the daemon
// mid-flush, umask 002, SCR_Finalize during a flush, and the FCNTL build run
// repeatedly.
//
// The SCR builds come from build.sh (SCR_LIB_FLOCK and SCR_LIB_FCNTL name
// them; .ci/run builds them once). Without them the tests skip, and fail
// under CI=true.
package scrlib

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// bins is this package's once-per-process build of scr-transferd; the
// test application, compiled against each SCR build, is put beside it.
var bins = testenv.NewBinaries(testenv.Build{Commands: []string{testenv.Daemon}})

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins)) }

// scrBuild is one SCR build (build.sh): its install prefix, the control
// base it was compiled with, and the test application built against it.
type scrBuild struct {
	locking string // "flock" or "fcntl"
	prefix  string
	cntl    string
	app     string
}

// builds caches the application built against each SCR build.
var builds sync.Map // locking → *scrBuild or error

// build returns the SCR build for locking; it skips the test when the
// build is not at hand (fails under CI=true, where .ci/run provides it).
func build(t *testing.T, locking string) *scrBuild {
	t.Helper()
	env := "SCR_LIB_" + strings.ToUpper(locking)
	prefix := os.Getenv(env)
	if prefix == "" {
		testenv.Absent(t, "%s is not set: run test/scrlib/build.sh and export what it prints", env)
	}
	if v, ok := builds.Load(locking); ok {
		if b, ok := v.(*scrBuild); ok {
			return b
		}
		t.Fatal(v)
	}
	b, err := makeBuild(t, locking, prefix, env)
	if err != nil {
		builds.Store(locking, err)
		t.Fatal(err)
	}
	builds.Store(locking, b)
	return b
}

// makeBuild checks the SCR build at prefix and compiles app.c against it.
func makeBuild(t *testing.T, locking, prefix, env string) (*scrBuild, error) {
	for _, f := range []string{".complete", "include/scr.h", "lib/libscr.so", "CNTL_BASE"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			return nil, fmt.Errorf("%s=%s is not a complete SCR build (test/scrlib/build.sh): %w", env, prefix, err)
		}
	}
	cntl, err := os.ReadFile(filepath.Join(prefix, "CNTL_BASE"))
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("mpicc"); err != nil {
		return nil, fmt.Errorf("mpicc: %w (install openmpi-bin libopenmpi-dev)", err)
	}
	dir, err := bins.Dir()
	if err != nil {
		return nil, err
	}
	app := filepath.Join(dir, "scrlib-app-"+locking)
	cmd := exec.Command("mpicc", "-O2", "-Wall", "-Werror", "-I"+filepath.Join(prefix, "include"), filepath.Join("app", "app.c"),
		"-L"+filepath.Join(prefix, "lib"), "-Wl,-rpath,"+filepath.Join(prefix, "lib"), "-lscr", "-o", app)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("compiling app/app.c against %s: %w\n%s", prefix, err, out)
	}
	return &scrBuild{locking: locking, prefix: prefix, cntl: strings.TrimSpace(string(cntl)), app: app}, nil
}

// job is one SCR job on this node: its file system (the prefix), its cache,
// and the transfer file its daemon serves.
type job struct {
	t        *testing.T
	b        *scrBuild
	id       string
	pfs      string
	cache    string
	transfer string
	user     string
}

func newJob(t *testing.T, b *scrBuild) *job {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	j := &job{t: t, b: b, id: fmt.Sprint(100000000 + rand.IntN(900000000)), pfs: filepath.Join(root, "pfs"),
		cache: filepath.Join(root, "cache"), user: u.Username}
	ctl := filepath.Join(b.cntl, j.user, "scr."+j.id)
	j.transfer = filepath.Join(ctl, "transfer.scrinfo")
	for _, d := range []string{j.pfs, j.cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The control base is the build's, outside the test's directory.
	if err := os.MkdirAll(ctl, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ctl) })
	return j
}

// startDaemon starts the daemon serving the job's transfer file, with the
// job's locking, and waits until it has recorded its STATE: SCR_Init waits
// for STATE STOPPED without a timeout.
func (j *job) startDaemon(umask int, flags ...string) *testenv.Process {
	j.t.Helper()
	args := append([]string{"--locking=" + j.b.locking}, flags...)
	args = append(args, j.transfer)
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("umask %03o; exec \"$0\" \"$@\"", umask), bins.Path(j.t, testenv.Daemon))
	cmd.Args = append(cmd.Args, args...)
	d := testenv.Start(j.t, cmd)
	j.waitFor("the daemon's STATE", func(v transfer.View) bool { return v.State != "" })
	return d
}

// stop ends the daemon with SIGTERM, as a job script does, and returns its
// exit status.
func stop(d *testenv.Process) int {
	_ = d.Cmd.Process.Signal(syscall.SIGTERM) // one that has exited says so by its status
	return d.Wait(30 * time.Second)
}

// kill ends the daemon with SIGKILL and waits for it.
func kill(d *testenv.Process) {
	_ = d.Cmd.Process.Signal(syscall.SIGKILL)
	d.Wait(time.Minute)
}

// view reads the transfer file without its lock, so as never to meet the
// library's non-blocking fcntl lock: an image caught half-written is read
// again.
func (j *job) view() (transfer.View, bool) {
	b, err := os.ReadFile(j.transfer)
	if err != nil {
		return transfer.View{}, false
	}
	t, err := hashfile.Decode(b)
	if err != nil {
		return transfer.View{}, false
	}
	return transfer.Read(t), true
}

// waitFor polls the transfer file until cond holds, failing after 60 s.
func (j *job) waitFor(what string, cond func(transfer.View) bool) transfer.View {
	j.t.Helper()
	var v transfer.View
	if !testenv.Until(60*time.Second, func() bool {
		var ok bool
		v, ok = j.view()
		return ok && cond(v)
	}) {
		j.t.Fatalf("no %s within 60 s", what)
	}
	return v
}

// run is one run of the application.
type run struct {
	*testenv.Process
	cancel context.CancelFunc
}

// app starts the application on ranks ranks with args, in the job's
// prefix, under umask umask, with SCR's settings plus env.
func (j *job) app(ranks, umask int, env []string, args ...string) *run {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	j.t.Cleanup(cancel)
	mpirun := append([]string{"--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(ranks), j.b.app}, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", fmt.Sprintf("umask %03o; exec mpirun \"$@\"", umask), "sh"}, mpirun...)...)
	cmd.Dir = j.pfs
	cmd.Env = append(os.Environ(), "USER="+j.user, "SCR_JOB_ID="+j.id, "SCR_PREFIX="+j.pfs, "SCR_CACHE_BASE="+j.cache,
		"SCR_FLUSH=1", "SCR_COPY_TYPE=SINGLE", "SCR_CACHE_SIZE=2", "OMPI_MCA_btl=self,vader",
		"OMPI_MCA_rmaps_base_oversubscribe=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	return &run{Process: testenv.Start(j.t, cmd), cancel: cancel}
}

// wait waits for the application and fails the test unless it succeeded
// without a lock failure of the library.
func (r *run) wait(t *testing.T) string {
	t.Helper()
	<-r.Done()
	r.cancel()
	out := r.Logs()
	if err := r.Cmd.ProcessState; err == nil || !err.Success() {
		t.Fatalf("the application failed or hung (%v):\n%s", r.Cmd.ProcessState, out)
	}
	if strings.Contains(out, "Failed to acquire file") {
		t.Fatalf("the library failed a lock of the transfer file:\n%s", out)
	}
	return out
}

// content returns the bytes app/app.c writes for checkpoint ckpt of rank r.
func content(r, ckpt, size int) []byte {
	b := make([]byte, size)
	copy(b, "SCRT")
	binary.BigEndian.PutUint32(b[4:], uint32(r))
	binary.BigEndian.PutUint32(b[8:], uint32(ckpt))
	x := uint64(0x9E3779B97F4A7C15) ^ uint64(r+1)<<32 ^ uint64(ckpt+1)
	if x == 0 {
		x = 1
	}
	for i := 16; i < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 56)
	}
	return b
}

// checkPFS fails unless every rank's file of checkpoint ckpt on the file
// system holds exactly the bytes the application wrote.
func (j *job) checkPFS(ranks, ckpt, size int) {
	j.t.Helper()
	for r := range ranks {
		p := filepath.Join(j.pfs, fmt.Sprintf("c%d.rank_%d.ckpt", ckpt, r))
		got, err := os.ReadFile(p)
		if err != nil {
			j.t.Fatal(err)
		}
		if want := content(r, ckpt, size); !bytes.Equal(got, want) {
			at := 0
			for at < min(len(got), len(want)) && got[at] == want[at] {
				at++
			}
			j.t.Fatalf("%s: %d bytes, want %d; first difference at byte %d", p, len(got), len(want), at)
		}
	}
}

// restart runs the application's restart in a new job with an empty
// cache: SCR fetches the newest checkpoint from the file system, and the
// application checks every byte of it.
func (j *job) restart(ranks, want int) {
	j.t.Helper()
	r := newJob(j.t, j.b)
	r.pfs = j.pfs
	out := r.app(ranks, 0o022, []string{"SCR_FLUSH_ASYNC=0"}, "restart").wait(j.t)
	if !strings.Contains(out, fmt.Sprintf("checkpoint %d, ", want)) || !strings.Contains(out, "every byte right") {
		j.t.Fatalf("restart did not find checkpoint %d whole:\n%s", want, out)
	}
}

// flushes counts the daemon's completed flushes of at least one file.
func flushes(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "flush complete: FLAG DONE set") && !strings.Contains(l, `"files": 0`) {
			n++
		}
	}
	return n
}

// noErrors fails if the daemon logged an ERROR.
func noErrors(t *testing.T, d *testenv.Process) {
	t.Helper()
	for _, l := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(l, "\tERROR\t") {
			t.Fatalf("the daemon logged an ERROR: %s", l)
		}
	}
}
