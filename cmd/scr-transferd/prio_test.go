package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/prio"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// threadNice reads the nice value of thread tid of process pid from
// /proc/PID/task/TID/stat (field 19, counted after the command name).
func threadNice(pid, tid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); nice is field 19.
	return strconv.Atoi(f[19-3])
}

// checkThreads checks the nice value and I/O class of every thread of pid.
func checkThreads(t *testing.T, pid, wantNice int) int {
	t.Helper()
	tids, err := prio.Threads(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		n, err := threadNice(pid, tid)
		if errors.Is(err, os.ErrNotExist) {
			continue // exited meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		class, err := prio.IOClass(tid)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n != wantNice || class != 3 {
			t.Errorf("thread %d of %d: nice %d, I/O class %d; want nice %d, class 3 (idle)", tid, len(tids), n, class, wantNice)
		}
	}
	return len(tids)
}

// TestPriorityOnEveryThread runs the daemon with --nice and --io-idle and
// checks every one of its threads, once it is up and again after a flush
// has made it create more, through /proc/PID/task/*/stat and ioprio_get.
func TestPriorityOnEveryThread(t *testing.T) {
	testenv.Long(t, "builds and runs the daemon")
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantNice := min(20-cur+5, 19)
	dir := t.TempDir()
	bin := bins.Path(t, testenv.Daemon)
	tf := filepath.Join(dir, "ctl", "transfer.scrinfo")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--nice=5", "--io-idle", "--poll=100ms", "--log-format=json", "--create-dir", tf)
	d := testenv.Start(t, cmd)
	defer func() {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		<-d.Done()
	}()
	store := hashfile.NewStore(tf, hashfile.Flock)
	waitFor := func(what string, ok func(transfer.View) bool) {
		t.Helper()
		testenv.WaitFor(t, what, time.Minute, func() bool {
			tree, err := store.Read()
			return err == nil && ok(transfer.Read(tree))
		})
	}
	waitFor("STATE", func(v transfer.View) bool { return v.State != "" })
	n1 := checkThreads(t, d.Pid(), wantNice)

	// A flush of several files: blocking reads, writes and fsyncs make the
	// runtime start more threads.
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		for i := range 8 {
			src := filepath.Join(dir, "cache", "f"+strconv.Itoa(i))
			if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(src, bytes.Repeat([]byte{byte(i)}, 1<<20), 0o644); err != nil {
				return err
			}
			transfer.AddFile(tr, src, filepath.Join(dir, "pfs", "f"+strconv.Itoa(i)), 1<<20)
		}
		transfer.SetCommand(tr, transfer.Run)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor("complete flush", func(v transfer.View) bool { return v.Done && !v.HasPending() })
	n2 := checkThreads(t, d.Pid(), wantNice)
	t.Logf("%d threads once up, %d after the flush, all at nice %d and idle I/O", n1, n2, wantNice)
	if n1 < 2 {
		t.Errorf("only %d thread(s): the check saw none of the runtime's threads", n1)
	}
}
