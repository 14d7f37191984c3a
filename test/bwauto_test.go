package test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/fusetest"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// fusemountOnce returns internal/fusetest's fusemount command, built once.
func fusemountOnce() (string, error) {
	dir, err := helperBins.Dir()
	return filepath.Join(dir, "fusemount"), err
}

// sharedPFS serves backing at mount through FUSE with one bucket of bw
// bytes/s, in a process of its own: a child of the process serving FUSE
// would inherit its /dev/fuse descriptor and hang on the mount for good
// if that process died first. It is unmounted when the test ends.
func sharedPFS(t *testing.T, backing, mount string, bw float64) {
	t.Helper()
	if err := fusetest.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	bin, err := fusemountOnce()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(mount, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-locks", "kernel", "-bw", fmt.Sprint(bw), backing, mount)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("fusemount: %v", err)
		}
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("fusemount did not serve %s (it said %q)", mount, line)
	}
}

// TestBWAutoSharedDestination: with --bw auto, a flush to a destination of
// finite bandwidth that an application on the node writes to at the same
// time (4 MiB + fsync every 200 ms, each a process of its own) finishes
// with every file byte-exact and recorded complete, the application's
// operations all complete, and the daemon logs the rate in force. Nothing
// here asserts a speed: the benchmark (go run ./test/bench -only auto)
// measures that.
func TestBWAutoSharedDestination(t *testing.T) {
	testenv.Long(t, "a FUSE destination of finite bandwidth shared with an application")
	n := newNode(t)
	shared := filepath.Join(n.root, "shared")
	sharedPFS(t, t.TempDir(), shared, 50e6)
	type ckpt struct {
		src, dest string
		data      []byte
	}
	var files []ckpt
	// Files copied one at a time: a batch of small files cannot publish
	// its unnamed copies on this FUSE file system (linkat fails with
	// EXDEV), which is not BW auto's concern.
	for i, size := range []int{24 << 20, 3 << 20, 6<<20 + 12345} {
		name := fmt.Sprintf("rank%d.ckpt", i)
		src, data := n.checkpoint(name, size)
		files = append(files, ckpt{src, filepath.Join(shared, "ckpt.1", name), data})
		n.add(src, files[i].dest)
	}
	d := n.start("--bw", "auto", "--sync-bytes=4194304")
	n.waitFor("STOPPED", 30*time.Second, func(v transfer.View) bool { return v.State == transfer.Stopped })

	appDir := filepath.Join(shared, "app")
	if err := os.MkdirAll(appDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	appDone := make(chan []error, 1)
	go func() { appDone <- appWrites(appDir, stop) }()
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	v := n.waitFor("the flush to finish", 5*time.Minute, func(v transfer.View) bool {
		for _, f := range v.Files {
			if f.Error != "" {
				t.Fatalf("%s: ERROR %s", f.Src, f.Error)
			}
		}
		return v.Done && !v.HasPending()
	})
	close(stop)
	errs := <-appDone
	if len(errs) == 0 {
		t.Fatal("the application ran no operation during the flush")
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("application operation %d: %v", i, err)
		}
	}
	for _, c := range files {
		f, ok := file(v, c.src)
		if !ok || f.Written != int64(len(c.data)) || f.Size != int64(len(c.data)) {
			t.Errorf("%s: entry %+v, want WRITTEN = SIZE = %d", c.src, f, len(c.data))
		}
		sameFile(t, c.dest, c.data)
		if _, err := os.Stat(flush.TempPath(c.dest)); !os.IsNotExist(err) {
			t.Errorf("%s: partial copy left behind (%v)", c.dest, err)
		}
	}
	if !strings.Contains(d.Log.String(), "bw auto rate") {
		t.Errorf("the daemon never logged its rate in force:\n%s", d.Log.String())
	}
}

// appWrites writes 4 MiB and fsyncs it into dir every 200 ms, each
// operation a dd process of its own, until stop is closed; it returns each
// operation's outcome. An operation is given a minute: one stuck behind
// the flush for longer is reported as failed.
func appWrites(dir string, stop <-chan struct{}) []error {
	var errs []error
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(dir, "output"), "bs=4M", "count=1", "conv=fsync,notrunc", "status=none")
		out, err := runWithin(cmd, time.Minute)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, out)
		}
		errs = append(errs, err)
		select {
		case <-stop:
			return errs
		case <-tick.C:
		}
	}
}

// runWithin runs cmd, killing it after d.
func runWithin(cmd *exec.Cmd, d time.Duration) ([]byte, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := time.AfterFunc(d, func() { _ = cmd.Process.Kill() })
	defer t.Stop()
	err := cmd.Wait()
	return []byte(out.String()), err
}
