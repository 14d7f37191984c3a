package test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// decodeWatch reads the transfer file under its shared lock over and over
// until stopped, and remembers the first image that does not decode.
type decodeWatch struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	err  error
	n    int
}

func watchDecodable(path string) *decodeWatch {
	w := &decodeWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			f, err := lockedFile(path, false)
			if err == nil {
				var b []byte
				b, err = io.ReadAll(f)
				f.Close()
				if err == nil {
					_, err = hashfile.Decode(b)
				}
			}
			w.mu.Lock()
			w.n++
			if err != nil && w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
			time.Sleep(2 * time.Millisecond) // pacing the reader, not a condition
		}
	}()
	return w
}

// check stops nothing; it fails the test if an undecodable image was seen.
func (w *decodeWatch) check(t *testing.T, when string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("%s: the transfer file was undecodable (after %d reads): %v", when, w.n, w.err)
	}
}

func (w *decodeWatch) close() { close(w.stop); <-w.done }

// padTo sets the top-level key PAD, which the daemon keeps as it is, so
// that the encoded image of t is exactly size bytes.
func padTo(t *testing.T, tr *hashfile.Tree, size int) {
	t.Helper()
	k := 1
	for range 4 {
		tr.SetValue("PAD", strings.Repeat("p", k))
		n := len(hashfile.Encode(tr))
		if n == size {
			return
		}
		k += size - n
		if k < 1 {
			t.Fatalf("cannot pad an image of %d bytes down to %d", n, size)
		}
	}
	t.Fatalf("cannot pad the image to %d bytes", size)
}

// noRoomFlush drives a flush whose progress cannot be recorded: full is
// called with the transfer file's size once the daemon runs, takes the
// room away so that the file cannot grow, and returns a function that
// gives it back. The transfer file must decode at every moment, the
// problem be logged once while the daemon retries, and the flush complete
// once there is room again.
func noRoomFlush(t *testing.T, n *node, full func(d *testenv.Process, size int) (restore func())) {
	srcs := map[string][]byte{}
	for i := range 3 {
		name := fmt.Sprintf("n%d.ckpt", i)
		p, data := n.checkpoint(name, 3000)
		srcs[p] = data
		n.add(p, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Stop) })
	d := n.start()
	n.waitFor("STOPPED recorded", settle, func(v transfer.View) bool { return v.State == transfer.Stopped })
	// An image two bytes short of a page, so that any growth needs room.
	size := 0
	n.library(func(tr *hashfile.Tree) {
		size = (len(hashfile.Encode(tr))/4096+2)*4096 - 2
		padTo(t, tr, size)
	})
	watch := watchDecodable(n.transfer)
	defer watch.close()
	restore := full(d, size)
	defer restore()

	// The library asks for the flush with an image of the same length,
	// written in place, as it needs no room.
	tr, err := hashfile.Decode(readRaw(t, n.transfer))
	must(t, err)
	transfer.SetCommand(tr, transfer.Run)
	padTo(t, tr, size)
	mark := d.LogMark()
	swapRaw(t, n.transfer, hashfile.Encode(tr))

	const complaint = "cannot rewrite the transfer file"
	if !testenv.Until(settle, func() bool {
		if strings.Contains(d.Log.String()[mark:], complaint) {
			return true
		}
		watch.check(t, "when the daemon recorded progress")
		return !d.Alive()
	}) || !strings.Contains(d.Log.String()[mark:], complaint) {
		t.Fatalf("log never said %q:\n%s", complaint, d.Log.String()[mark:])
	}
	errAt := mark + strings.Index(d.Log.String()[mark:], complaint)
	t.Logf("daemon: %s", strings.SplitN(d.Log.String()[errAt:], "\n", 2)[0])
	// It goes on trying: three more copy attempts, no second complaint.
	if !testenv.Until(settle, func() bool {
		return strings.Count(d.Log.String()[errAt:], "\tcopy\t") >= 3 || !d.Alive()
	}) || strings.Count(d.Log.String()[errAt:], "\tcopy\t") < 3 {
		t.Fatalf("the daemon did not retry:\n%s", d.Log.String()[mark:])
	}
	if c := strings.Count(d.Log.String(), complaint); c != 1 {
		t.Fatalf("the problem was logged %d times, want once:\n%s", c, d.Log.String()[mark:])
	}
	watch.check(t, "while full")
	if v := n.view(); v.Done {
		t.Fatal("DONE recorded while the transfer file could not grow")
	}

	restore()
	v := n.waitFor("DONE once there is room", settle, done)
	watch.check(t, "after the room came back")
	checkFlushed(t, v, srcs)
	d.WaitLogAfter(errAt, settle, "transfer file readable again")
	if c := strings.Count(d.Log.String(), complaint); c != 1 {
		t.Fatalf("the problem was logged %d times, want once", c)
	}
}

// TestControlFileSystemFull: SCR's control directory is on /dev/shm by
// default; when it is full the transfer file must not tear.
func TestControlFileSystemFull(t *testing.T) {
	n := newNode(t)
	ctl := filepath.Dir(n.transfer)
	mountTmpfs(t, ctl, 0, "size=64k,mode=0755")
	noRoomFlush(t, n, func(_ *testenv.Process, _ int) func() {
		filler := filepath.Join(ctl, "filler")
		f, err := os.Create(filler)
		must(t, err)
		page := make([]byte, 4096)
		for {
			if _, err := f.Write(page); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
		must(t, f.Close())
		var once sync.Once
		return func() { once.Do(func() { must(t, os.Remove(filler)) }) }
	})
}

// TestTransferFileSizeLimit: the same under RLIMIT_FSIZE, which needs no
// mount: the daemon may not make any file larger than the transfer file
// is now (the checkpoints are smaller).
func TestTransferFileSizeLimit(t *testing.T) {
	n := newNode(t)
	noRoomFlush(t, n, func(d *testenv.Process, size int) func() {
		pid := d.Pid()
		var old unix.Rlimit
		must(t, unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(size) + 1, Max: unix.RLIM_INFINITY}, &old))
		var once sync.Once
		return func() {
			once.Do(func() {
				if d.Alive() {
					must(t, unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}, nil))
				}
			})
		}
	})
}
