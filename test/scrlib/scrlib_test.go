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
	"github.com/scr-transferd/scr-transferd/transfer"
)

// binDir holds the daemon, built once for the package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "scrlib-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir, "../../cmd/scr-transferd")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the daemon:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

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
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: .ci/run builds SCR 1.2.2 with test/scrlib/build.sh and exports it", env)
		}
		t.Skipf("%s is not set: run test/scrlib/build.sh and export what it prints", env)
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
	app := filepath.Join(binDir, "scrlib-app-"+locking)
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

// daemon is a running scr-transferd.
type daemon struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
}

// syncBuffer is a bytes.Buffer safe for the daemon's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemon starts the daemon serving the job's transfer file, with the
// job's locking, and waits until it has recorded its STATE: SCR_Init waits
// for STATE STOPPED without a timeout.
func (j *job) startDaemon(umask int, flags ...string) *daemon {
	j.t.Helper()
	args := append([]string{"--locking=" + j.b.locking}, flags...)
	args = append(args, j.transfer)
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("umask %03o; exec \"$0\" \"$@\"", umask), filepath.Join(binDir, "scr-transferd"))
	cmd.Args = append(cmd.Args, args...)
	d := &daemon{cmd: cmd, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.log, d.log
	if err := cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(d.done) }()
	j.t.Cleanup(func() {
		d.kill()
		if j.t.Failed() {
			j.t.Logf("daemon log:\n%s", d.log.String())
		}
	})
	j.waitFor("the daemon's STATE", func(v transfer.View) bool { return v.State != "" })
	return d
}

// kill ends the daemon with SIGKILL and waits for it.
func (d *daemon) kill() {
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.done
	}
}

// stop ends the daemon with SIGTERM, as a job script does, and returns its
// exit status.
func (d *daemon) stop(t *testing.T) int {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit within 30 s of SIGTERM")
	}
	return d.cmd.ProcessState.ExitCode()
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
	deadline := time.Now().Add(60 * time.Second)
	for {
		if v, ok := j.view(); ok && cond(v) {
			return v
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("no %s within 60 s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// run is one run of the application.
type run struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan struct{}
	cancel context.CancelFunc
}

// app starts the application on ranks ranks with args, in the job's
// prefix, under umask umask, with SCR's settings plus env.
func (j *job) app(ranks, umask int, env []string, args ...string) *run {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	mpirun := append([]string{"--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(ranks), j.b.app}, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", fmt.Sprintf("umask %03o; exec mpirun \"$@\"", umask), "sh"}, mpirun...)...)
	cmd.Dir = j.pfs
	cmd.Env = append(os.Environ(), "USER="+j.user, "SCR_JOB_ID="+j.id, "SCR_PREFIX="+j.pfs, "SCR_CACHE_BASE="+j.cache,
		"SCR_FLUSH=1", "SCR_COPY_TYPE=SINGLE", "SCR_CACHE_SIZE=2", "OMPI_MCA_btl=self,vader",
		"OMPI_MCA_rmaps_base_oversubscribe=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	r := &run{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{}), cancel: cancel}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		cancel()
		j.t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	j.t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// wait waits for the application and fails the test unless it succeeded
// without a lock failure of the library.
func (r *run) wait(t *testing.T) string {
	t.Helper()
	<-r.done
	r.cancel()
	out := r.out.String()
	if err := r.cmd.ProcessState; err == nil || !err.Success() {
		t.Fatalf("the application failed or hung (%v):\n%s", r.cmd.ProcessState, out)
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
func noErrors(t *testing.T, d *daemon) {
	t.Helper()
	for _, l := range strings.Split(d.log.String(), "\n") {
		if strings.Contains(l, "\tERROR\t") {
			t.Fatalf("the daemon logged an ERROR: %s", l)
		}
	}
}
