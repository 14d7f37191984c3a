package prio

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const childEnv = "PRIO_TEST_CHILD"

// lockedThreads starts n goroutines, each holding an OS thread of its own
// until release is closed, and returns once all run.
func lockedThreads(n int, release <-chan struct{}) {
	started := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			<-release
		}()
	}
	for range n {
		<-started
	}
}

// checkAll reports every thread of this process whose nice value or I/O
// class differs.
func checkAll(nice int) []string {
	tids, err := Threads(os.Getpid())
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	for _, tid := range tids {
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		class, cerr := IOClass(tid)
		if err != nil || cerr != nil {
			continue // exited
		}
		if 20-cur != nice || class != ioprioClassIdle {
			bad = append(bad, fmt.Sprintf("thread %d: nice %d class %d", tid, 20-cur, class))
		}
	}
	return append(bad, fmt.Sprintf("%d threads", len(tids)))
}

// TestSetAllEveryThread runs in a child process (it lowers the priority of
// the whole process for good): threads that exist before SetAll and
// threads created after it must all have the new values.
func TestSetAllEveryThread(t *testing.T) {
	if os.Getenv(childEnv) == "setall" {
		release := make(chan struct{})
		defer close(release)
		lockedThreads(4, release)
		cur, _ := unix.Getpriority(unix.PRIO_PROCESS, 0)
		want := min(20-cur+3, 19)
		if err := SetAll(Settings{Nice: 3, IOIdle: true}); err != nil {
			t.Fatal(err)
		}
		lockedThreads(4, release) // created later, by threads already lowered
		fmt.Printf("\nRESULT want=%d %s\n", want, strings.Join(checkAll(want), "; "))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSetAllEveryThread$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=setall")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var result string
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			result = r
		}
	}
	parts := strings.Split(result, "; ")
	if result == "" || len(parts) != 1 {
		t.Fatalf("threads not lowered: %s\n%s", result, out)
	}
	n, _ := strconv.Atoi(strings.Fields(parts[0])[1])
	if n < 9 {
		t.Errorf("only %s: the locked threads were not all seen", parts[0])
	}
	t.Log(result)
}

// TestLowerInTheReexecutedProgram: with the marker of the same settings
// Lower does nothing more and removes the marker, so that nothing the
// daemon starts inherits it.
func TestLowerInTheReexecutedProgram(t *testing.T) {
	s := Settings{Nice: 4, IOIdle: true}
	t.Setenv(Marker, s.String())
	fellBack, err := Lower(s)
	if fellBack || err != nil {
		t.Fatalf("Lower with the marker: %v %v", fellBack, err)
	}
	if _, ok := os.LookupEnv(Marker); ok {
		t.Error("the marker is still in the environment")
	}
}

func TestLowerWithNothingToDo(t *testing.T) {
	if fellBack, err := Lower(Settings{}); fellBack || err != nil {
		t.Fatalf("%v %v", fellBack, err)
	}
}
