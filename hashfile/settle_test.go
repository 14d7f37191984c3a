package hashfile

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSettleDecideAt: the settling policy at fixed times, for the default
// settle time of 100 ms (window 20 ms, idle 200 ms, bound 1 s), following
// SCR 1.2's accesses: a write (t0), at once a read, then the application
// computes or the library polls every 10 s.
func TestSettleDecideAt(t *testing.T) {
	p := newSettlePolicy(100 * time.Millisecond)
	if p.settle != 100*time.Millisecond || p.window != 20*time.Millisecond || p.idle != 200*time.Millisecond || p.bound != time.Second {
		t.Fatalf("policy %+v", p)
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const lock, look = "lock", "wait"
	for _, tc := range []struct {
		name    string
		now     time.Time
		in      settleInput
		want    string
		starved bool
	}{
		{"nothing of the library seen", ms(0), settleInput{waiting: ms(0)}, lock, false},
		{"just after its write, its read not seen", ms(10), settleInput{changed: ms(0), waiting: ms(5)}, look, false},
		{"its read seen to end: the quiet that follows", ms(6), settleInput{changed: ms(0), readAfter: true, ended: ms(5), active: ms(5), watching: true, waiting: ms(2)}, lock, false},
		{"its read under way", ms(6), settleInput{changed: ms(0), open: true, active: ms(6), waiting: ms(2)}, look, false},
		{"unwatched: settle after the write", ms(100), settleInput{changed: ms(0), waiting: ms(2)}, lock, false},
		{"unwatched: window after the settle", ms(120), settleInput{changed: ms(0), waiting: ms(2)}, lock, false},
		{"watched, its read ended unseen: no window", ms(100), settleInput{changed: ms(0), active: ms(1), watching: true, waiting: ms(1)}, look, false},
		{"watched, its read ended unseen: idle", ms(201), settleInput{changed: ms(0), active: ms(1), watching: true, waiting: ms(1)}, lock, false},
		{"watched, no read: not before the settle", ms(60), settleInput{changed: ms(0), active: ms(1), watching: true, waiting: ms(1), deadline: ms(300)}, look, false},
		{"after the window, the library may be back", ms(150), settleInput{changed: ms(0), waiting: ms(140)}, look, false},
		{"after the window of its read", ms(50), settleInput{changed: ms(0), readAfter: true, ended: ms(5), active: ms(5), watching: true, waiting: ms(40)}, look, false},
		{"a flush's first commit, 0.65 s after RUN", ms(650), settleInput{changed: ms(0), readAfter: true, ended: ms(5), active: ms(5), watching: true, waiting: ms(650)}, lock, false},
		{"idle without inotify", ms(300), settleInput{changed: ms(0), waiting: ms(400)}, lock, false},
		{"idle, but an access under way", ms(400), settleInput{changed: ms(0), open: true, active: ms(400), waiting: ms(390)}, look, false},
		{"a poll's read ended at an unknown moment: no window", ms(10060), settleInput{changed: ms(0), readAfter: true, ended: ms(5), active: ms(10050), watching: true, waiting: ms(10060)}, look, false},
		{"a poll's read seen to end", ms(10052), settleInput{changed: ms(0), readAfter: true, ended: ms(10050), active: ms(10050), watching: true, waiting: ms(10040)}, lock, false},
		{"a library writing every 30 ms, within the bound", ms(990), settleInput{changed: ms(960), waiting: ms(0)}, look, false},
		{"a library writing every 30 ms, at the bound", ms(1000), settleInput{changed: ms(990), waiting: ms(0)}, look, false},
		{"at the bound, the library's access under way", ms(1500), settleInput{changed: ms(0), open: true, active: ms(1500), watching: true, waiting: ms(0)}, look, false},
		{"at the bound, outside the library's access", ms(1000), settleInput{changed: ms(0), active: ms(990), watching: true, waiting: ms(0)}, lock, true},
		{"a library writing every 30 ms, at twice the bound", ms(2000), settleInput{changed: ms(1990), waiting: ms(0)}, lock, true},
		{"a deadline: no window or idleness waited for", ms(150), settleInput{changed: ms(0), waiting: ms(140), deadline: ms(450)}, lock, false},
		{"a deadline: the settle still waited for", ms(20), settleInput{changed: ms(0), waiting: ms(10), deadline: ms(310)}, look, false},
		{"a deadline near: lock anyway", ms(280), settleInput{changed: ms(250), waiting: ms(10), deadline: ms(310)}, lock, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.decideAt(tc.now, tc.in)
			got := lock
			if d.wait > 0 {
				got = look
			}
			if got != tc.want || d.starved != tc.starved {
				t.Fatalf("decideAt = %+v, want %s (starved %v)", d, tc.want, tc.starved)
			}
			if d.wait > settlePoll {
				t.Fatalf("waits %v before looking again, more than %v", d.wait, settlePoll)
			}
		})
	}
}

// TestSettleEndsAtTheLibrarysRead: after a change of the library, an
// access waits for the library's read that follows, seen as it happens,
// not for the whole settle time; without that read it waits the settle
// time.
func TestSettleEndsAtTheLibrarysRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	lib := NewStore(path, Fcntl)
	d := NewStore(path, Fcntl)
	const settle = 500 * time.Millisecond
	d.Settle(time.Millisecond)
	if _, _, err := d.Update(growBy(1)); err != nil { // the file made, the watch begun
		t.Fatal(err)
	}
	d.Settle(settle)
	for i, read := range []bool{true, false} {
		if _, _, err := lib.Update(growBy(i + 2)); err != nil {
			t.Fatal(err)
		}
		wrote := time.Now()
		done := make(chan time.Time, 1)
		go func() {
			_, _, err := d.UpdateContext(context.Background(), func(tr *Tree) error {
				tr.SetValue("DAEMON", strconv.Itoa(i))
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			done <- time.Now()
		}()
		var readAt time.Time
		if read {
			// The library's read comes once the access is waiting.
			time.Sleep(50 * time.Millisecond) // the library's work between its write and its read, not a wait for a condition
			if _, err := lib.Read(); err != nil {
				t.Fatal(err)
			}
			readAt = time.Now()
		}
		at := <-done
		t.Logf("read %v: locked %v after the library's write", read, at.Sub(wrote))
		if read {
			if at.Before(readAt) {
				t.Fatalf("locked %v after the write, before the library's read", at.Sub(wrote))
			}
			if at.Sub(wrote) >= settle {
				t.Fatalf("locked %v after the write, %v after the library's read: the read was not seen", at.Sub(wrote), at.Sub(readAt))
			}
		} else if at.Sub(wrote) < settle {
			t.Fatalf("locked %v after the write with no read seen, want the settle time %v", at.Sub(wrote), settle)
		}
	}
}

// TestSettleStarved: a library that changes the file without pause does
// not hold an access back beyond the bound; the hook is told when an access
// goes ahead without quiet, and again when one finds quiet.
func TestSettleStarved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	// flock: the library writes while the access goes ahead, and fcntl
	// locks of one process never exclude each other.
	lib := NewStore(path, Flock)
	d := NewStore(path, Flock)
	d.Settle(200 * time.Millisecond) // bound 2 s; 4 s while the library has just written
	reports := make(chan time.Time, 4)
	d.OnSettleWait(func(since time.Time) { reports <- since })
	if _, _, err := lib.Update(growBy(1)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	writing := make(chan struct{})
	var wrote []time.Time // when each of the library's writes ended
	go func() {
		defer close(writing)
		for i := 0; ctx.Err() == nil; i++ {
			if _, _, err := lib.Update(func(tr *Tree) error { tr.SetValue("LIBSEQ", strconv.Itoa(i)); return nil }); err != nil {
				t.Error(err)
				return
			}
			wrote = append(wrote, time.Now())
			time.Sleep(30 * time.Millisecond) // the library's pace, not a wait for a condition
		}
	}()
	began := time.Now()
	if _, _, err := d.Update(func(tr *Tree) error { tr.SetValue("STATE", "STOPPED"); return nil }); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	stop()
	<-writing
	// A loaded machine may hold the library back: a pause of the settle
	// time or more is a quiet moment, which the access may take.
	var pause time.Duration
	for i := 1; i < len(wrote); i++ {
		if wrote[i].After(began) && wrote[i-1].Before(began.Add(took)) {
			pause = max(pause, wrote[i].Sub(wrote[i-1]))
		}
	}
	if took > 10*time.Second {
		t.Fatalf("a starved access took %v, want at most twice the bound of 2 s (and not much more)", took)
	}
	if pause >= 200*time.Millisecond {
		t.Logf("the library paused %v: the access took %v, its quiet", pause, took)
		return
	}
	if took < 2*time.Second {
		t.Fatalf("an access went ahead after %v while the library never paused %v or more, before the bound of 2 s", took, pause)
	}
	select {
	case since := <-reports:
		if since.IsZero() || since.Before(began) {
			t.Fatalf("starved wait reported since %v, began %v", since, began)
		}
	default:
		t.Fatal("the starved wait was not reported")
	}
	if _, _, err := d.Update(growBy(3)); err != nil { // the library now quiet
		t.Fatal(err)
	}
	select {
	case end := <-reports:
		if !end.IsZero() {
			t.Fatalf("quiet found again reported as %v, want the zero time", end)
		}
	default:
		t.Fatal("an access that found quiet after a starved one did not report it")
	}
}

// FuzzAccessWatchParse: the decoder of inotify's event records never
// panics, never reads past its input, and counts at most one open or
// close per whole record.
func FuzzAccessWatchParse(f *testing.F) {
	ev := func(wd int32, mask uint32, name string) []byte {
		b := make([]byte, unix.SizeofInotifyEvent+len(name))
		binary.NativeEndian.PutUint32(b[0:], uint32(wd))
		binary.NativeEndian.PutUint32(b[4:], mask)
		binary.NativeEndian.PutUint32(b[12:], uint32(len(name)))
		copy(b[unix.SizeofInotifyEvent:], name)
		return b
	}
	f.Add(append(ev(1, unix.IN_OPEN, ""), ev(1, unix.IN_CLOSE_WRITE, "")...))
	f.Add(append(ev(2, unix.IN_OPEN, "x\x00\x00\x00"), ev(1, unix.IN_Q_OVERFLOW, "")...))
	f.Add(ev(1, unix.IN_CLOSE_NOWRITE, "")[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &accessWatch{wd: 1, open: 3}
		opens, closes := w.parse(b)
		if opens < 0 || closes < 0 || opens+closes > len(b)/unix.SizeofInotifyEvent {
			t.Fatalf("%d opens and %d closes in %d bytes", opens, closes, len(b))
		}
	})
}

// TestAccessWatchParse: opens and closes of the watched inode are counted,
// other watches' events are not, and an overflow forgets what is under way.
func TestAccessWatchParse(t *testing.T) {
	ev := func(wd int32, mask uint32, name string) []byte {
		b := make([]byte, unix.SizeofInotifyEvent+len(name))
		binary.NativeEndian.PutUint32(b[0:], uint32(wd))
		binary.NativeEndian.PutUint32(b[4:], mask)
		binary.NativeEndian.PutUint32(b[12:], uint32(len(name)))
		return b
	}
	for _, tc := range []struct {
		name                string
		b                   []byte
		opens, closes, open int
	}{
		{"open and close", append(ev(1, unix.IN_OPEN, ""), ev(1, unix.IN_CLOSE_WRITE, "")...), 1, 1, 3},
		{"read-only close", ev(1, unix.IN_CLOSE_NOWRITE, ""), 0, 1, 3},
		{"another watch", ev(2, unix.IN_OPEN, "name"), 0, 0, 3},
		{"overflow", ev(-1, unix.IN_Q_OVERFLOW, ""), 0, 0, 0},
		{"a record cut short", ev(1, unix.IN_OPEN, "name")[:unix.SizeofInotifyEvent+2], 0, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &accessWatch{wd: 1, open: 3}
			opens, closes := w.parse(tc.b)
			if opens != tc.opens || closes != tc.closes || w.open != tc.open {
				t.Fatalf("opens %d closes %d open %d, want %d %d %d", opens, closes, w.open, tc.opens, tc.closes, tc.open)
			}
		})
	}
}

// TestSettleDecisionHoldsAtTheLock: the library opening the file for its
// next access between the access's decision to go ahead and its lock
// (a moment the daemon was not running, on a loaded machine) makes the
// access let go of the lock at once and report it busy: SCR 1.2's
// non-blocking lock that follows the open must not meet it.
func TestSettleDecisionHoldsAtTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	d := NewStore(path, Fcntl)
	d.Settle(time.Millisecond)
	if _, _, err := d.Update(growBy(1)); err != nil { // the file made, the watch begun
		t.Fatal(err)
	}
	d.Settle(200 * time.Millisecond)
	ctx := context.Background()
	if err := d.waitSettled(ctx); err != nil { // quiet: no library about
		t.Fatal(err)
	}
	f, err := d.open(os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer d.closeFile(f)
	lib, err := os.OpenFile(path, os.O_RDWR, 0) // the library's next access begins
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if err := d.tryLockSettled(ctx, f, true); !errors.Is(err, errBusy) {
		t.Fatalf("lock taken while the library has the file open for its access (%v), want it let go as busy", err)
	}
	// Let go indeed: the library's own non-blocking lock succeeds. (fcntl
	// locks of one process never exclude each other: ask the kernel who
	// would block a lock instead.)
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(lib.Fd(), unix.F_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if lk.Type != unix.F_UNLCK {
		t.Fatalf("a lock is still held on the file (type %d, pid %d)", lk.Type, lk.Pid)
	}
}
