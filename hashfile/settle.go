package hashfile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Settling: how a Store shares the transfer file with SCR up to 1.2 built
// with fcntl locking. That library takes its lock with a non-blocking
// F_SETLK, for its writes and its reads alike (both F_WRLCK, on a file
// opened O_RDWR), and fails outright on EAGAIN: it logs "Failed to acquire
// file read lock" and then uses the failure code as a file descriptor,
// which hangs the application. Its accesses come in bursts: at a
// checkpoint a write (the flush's start, or its end and the next start)
// and at once a read (the test of the flush); then the application
// computes, and while it waits for a flush it reads the file every 10 s.
//
// So an access of the Store waits, after a change it did not make, for the
// library's read that follows (seen as it happens with inotify, on this
// node), at most the settle time; it then goes ahead in the quiet that
// follows the library's burst. A library that keeps coming back (a burst
// at least every idle time) is met only in that quiet, the window right
// after each of its bursts; one that has gone idle is not waited for. A
// wait that finds no quiet at all within the bound goes ahead anyway and
// is reported, so that a library that never pauses cannot starve the
// daemon; a caller with a deadline (a daemon stopping on a signal) does
// not wait for a window or for idleness, only for the library's burst to
// end.

// settlePolicy holds the bounds of settling, all derived from the settle
// time given to Settle.
type settlePolicy struct {
	settle time.Duration // longest wait after the library's change for its read that follows
	window time.Duration // after a burst of the library seen to end, how long its quiet is taken as certain
	idle   time.Duration // a library not seen for this long is idle: no window is waited for
	bound  time.Duration // longest wait for quiet (see decideAt); then the access goes ahead, reported
}

// newSettlePolicy returns the policy for a settle time d (see Settle).
func newSettlePolicy(d time.Duration) settlePolicy {
	return settlePolicy{
		settle: d,
		window: d / 5,
		idle:   2 * d,
		bound:  max(10*d, time.Second),
	}
}

// deadlineMargin is how long before its context's deadline an access
// stops waiting for the library, so that it still has time to lock.
const deadlineMargin = 30 * time.Millisecond

// settleInput is what a decision to access the file is made from: what
// was seen of the library, and the access's own wait.
type settleInput struct {
	// changed is when the library's last change of the file was made (its
	// change time, not later than when it was seen); zero if none seen.
	changed time.Time
	// readAfter: an access of the library that began after that change
	// was seen has ended (its read that follows the write).
	readAfter bool
	// ended is when an access of the library was last seen to end as it
	// happened; zero if none.
	ended time.Time
	// active is the latest the library may have been at the file: an
	// access seen only afterwards ended at an unknown moment before it.
	active time.Time
	// open: an access of the library is under way now.
	open bool
	// watching: the library's accesses are seen as they happen
	// (inotify); if not, its read is taken to end settle after its change.
	watching bool
	// waiting is when this access began to wait; deadline is its
	// context's deadline, zero if none.
	waiting, deadline time.Time
}

// settleDecision is what an access does now.
type settleDecision struct {
	wait    time.Duration // look again after this long; zero: lock now
	starved bool          // lock now although the library left no quiet within the bound
}

// decideAt decides, at now, whether an access may take the lock: pure, for
// the table tests.
func (p settlePolicy) decideAt(now time.Time, in settleInput) settleDecision {
	if in.changed.IsZero() && in.ended.IsZero() && in.active.IsZero() && !in.open {
		return settleDecision{}
	}
	ready := !in.open
	var assumed time.Time // its read not seen: taken to end settle after the change
	if !in.changed.IsZero() && !in.readAfter {
		assumed = in.changed.Add(p.settle)
		if now.Before(assumed) {
			ready = false
		}
	}
	// end: when the library's last burst ended, as seen, or as assumed
	// where its accesses cannot be seen. Watched, a read not seen to end
	// (it ended before the change was seen) opens no window: when it
	// ended is unknown.
	end := in.ended
	if !in.watching && assumed.After(end) {
		end = assumed
	}
	last := later(end, in.active) // the library's last known activity
	if ready {
		inWindow := !end.IsZero() && !end.Before(last) && now.Sub(end) <= p.window
		if inWindow || now.Sub(last) >= p.idle || !in.deadline.IsZero() {
			return settleDecision{}
		}
	}
	// Past the bound, the access goes ahead without a window or
	// idleness, still outside the library's access and its write's settle
	// when it can; past twice the bound, whatever the library does.
	if waited := now.Sub(in.waiting); waited >= 2*p.bound || ready && waited >= p.bound {
		return settleDecision{starved: true}
	}
	if !in.deadline.IsZero() && !now.Before(in.deadline.Add(-deadlineMargin)) {
		return settleDecision{}
	}
	return settleDecision{wait: settlePoll}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// settlePoll is how often a waiting access looks at the file again.
const settlePoll = 2 * time.Millisecond

// witnessed is the longest gap between two looks over which the end of
// another process's access still counts as seen when it happened (a
// loaded machine makes the looks late).
const witnessed = 50 * time.Millisecond

// settler is the settling state of a Store; the Store's semaphore guards
// it.
type settler struct {
	policy  settlePolicy
	own     fileSig   // the file as the Store last wrote it
	foreign fileSig   // the last version of the file someone else wrote
	changed time.Time // its change time; zero if none seen
	// onStarve is told, with the time the wait began, when an access went
	// ahead without quiet, and with the zero time when one finds quiet
	// again; starved says the first has been told and not the second.
	onStarve func(since time.Time)
	starved  bool
	// lastStarve: the Store's last decision went ahead without quiet; a
	// change met under the lock is then accepted too.
	lastStarve bool
	watch      *accessWatch // the library's accesses, seen with inotify; nil if unavailable
	watchTried bool
	cur        *os.File // the Store's open file, nil if none
	// openedAtOwn is the watch's count of others' opens when the Store
	// last wrote the file or looked at its content.
	openedAtOwn uint64
	since       time.Time // when the access under way began to wait
}

// Settle makes every later access wait for the library's quiet before it
// takes the lock (see the comment at the head of settle.go); zero
// disables settling. With settle time d an access waits, after a change
// the Store did not make, for the library's read that follows, at most d;
// a library seen within 2d is met only within d/5 of the end of one of
// its bursts; past max(10d, 1 s) without quiet an access goes ahead as
// soon as the library has no access under way and its last change is d
// old, and past twice that whatever the library does. A new
// settle time keeps what was seen of the file and of the library.
func (s *Store) Settle(d time.Duration) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if d <= 0 {
		s.settle = nil
		return
	}
	if s.settle != nil {
		s.settle.policy = newSettlePolicy(d) // what was seen of the file stands
		return
	}
	s.settle = &settler{policy: newSettlePolicy(d), onStarve: func(time.Time) {}}
}

// OnSettleWait sets a hook called, from the waiting goroutine, when an
// access went ahead after waiting the settling bound without finding the
// library quiet (with the time its wait began), and again with the zero
// time when an access finds quiet again. It applies to settling set
// before it.
func (s *Store) OnSettleWait(fn func(since time.Time)) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.settle != nil {
		s.settle.onStarve = fn
	}
}

// beginSettled begins an access: it waits for the library's quiet (see
// waitSettled) with the bound counting from now, whatever the access
// before it left.
func (s *Store) beginSettled(ctx context.Context) error {
	if s.settle != nil {
		s.settle.since = time.Time{}
	}
	return s.waitSettled(ctx)
}

// waitSettled waits for the library's quiet (see Settle). The bound
// counts from the access's first wait: the lock's retries, made with the
// access's file open, wait again.
func (s *Store) waitSettled(ctx context.Context) error {
	st := s.settle
	if st == nil {
		return nil
	}
	if !st.watchTried {
		st.watchTried = true
		st.watch = newAccessWatch()
	}
	if st.since.IsZero() {
		st.since = time.Now() // the access's first wait, before it opens the file
	}
	since := st.since
	deadline, _ := ctx.Deadline()
	var t *time.Timer
	for {
		now := time.Now()
		in := st.observe(s.path, now, s.unchanged)
		in.waiting, in.deadline = since, deadline
		d := st.policy.decideAt(now, in)
		if d.wait <= 0 {
			st.decided(d.starved, since)
			return nil
		}
		if t == nil {
			t = time.NewTimer(d.wait)
			defer t.Stop()
		} else {
			t.Reset(d.wait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", s.path, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// decided records a decision to lock, and reports a starved wait or its
// end.
func (st *settler) decided(starved bool, since time.Time) {
	st.lastStarve = starved
	switch {
	case starved && !st.starved:
		st.starved = true
		st.onStarve(since)
	case !starved && st.starved:
		st.starved = false
		st.onStarve(time.Time{})
	}
}

// observe looks at the file and at the library's accesses seen since the
// last look, and returns what a decision is made from. The file is looked
// at first: an access of the library that began before its change was
// seen is then among the events read after, and is not taken for the read
// that follows the change. unchanged tells whether the file still holds
// the image the Store last wrote: a change made within the same tick of
// the kernel's clock as the Store's own write leaves the same change time.
func (st *settler) observe(path string, now time.Time, unchanged func() bool) settleInput {
	var fst unix.Stat_t
	changedNow := false
	var sig fileSig
	if err := unix.Stat(path, &fst); err == nil {
		if sig = sigOf(&fst); sig != st.own && sig != st.foreign {
			// A change time ahead of this clock (a file server's clock
			// running ahead) counts as now, so skew cannot stall access.
			at := time.Unix(fst.Ctim.Unix())
			if at.After(now) {
				at = now
			}
			st.foreign, st.changed, changedNow = sig, at, true
		}
		if st.watch != nil {
			st.watch.follow(path, &fst, st.cur)
		}
	}
	in := settleInput{changed: st.changed}
	if w := st.watch; w != nil && w.wd >= 0 {
		in.watching = true
		w.read(now)
		if !changedNow && sig == st.own && w.opened > st.openedAtOwn && st.cur == nil {
			// Another process opened the file since the Store's write, and
			// the change time is the Store's: the content tells. Not while
			// the access has the file open (a lock retry): the lock taken
			// checks the change time again.
			st.openedAtOwn = w.opened
			if !unchanged() {
				st.own, st.foreign, st.changed, changedNow = fileSig{}, sig, now, true
				in.changed = now
			}
		}
		if changedNow {
			w.opensAtChange = w.opened
		}
		in.open = w.open > 0
		in.readAfter = !st.changed.IsZero() && w.opened > w.opensAtChange && !in.open
		in.ended, in.active = w.ended, w.active
	}
	return in
}

// remember records the file as this Store left it, so that settling does
// not wait after the Store's own changes.
func (s *Store) remember(f *os.File) {
	if s.settle == nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) == nil {
		s.settle.own = sigOf(&st)
	}
	if s.settle.watch != nil {
		s.settle.openedAtOwn = s.settle.watch.opened
	}
}

// opened tells the settling state that the Store opened the file as f.
func (s *Store) opened(f *os.File) {
	if s.settle == nil {
		return
	}
	s.settle.cur = f
	if w := s.settle.watch; w != nil {
		w.ownOpened(f)
		// Take the open's event in at once: inotify merges identical
		// events not yet read, so a library's open that followed would
		// be merged into this one and taken for the Store's own.
		w.read(time.Now())
	}
}

// closeFile closes f, which the Store opened, and tells the settling state.
func (s *Store) closeFile(f *os.File) {
	if s.settle != nil {
		if s.settle.cur == f {
			s.settle.cur = nil
		}
		if s.settle.watch != nil {
			s.settle.watch.ownClosing(f)
		}
	}
	f.Close()
}

// backoff returns the Store's wait before retry n (from 0) of a lock held
// by another process: lockBackoff's, without the quick retries while
// settling (SCR up to 1.2 with fcntl locking), as each attempt may take the
// lock for an instant, in which the library's own non-blocking attempt
// fails outright.
func (s *Store) backoff(n int) time.Duration {
	if s.settle != nil {
		n += lockQuickTries
	}
	return lockBackoff(n)
}

// tryLockSettled takes the lock without waiting. When settling, the
// decision to go ahead must still hold once the lock is taken: a change
// someone made since the quiet moment seen (the library's write, its read
// to follow), or the quiet over meanwhile (the library opening the file
// for its next access, or the window passed while this process was not
// running), makes it let go at once and report the lock busy, so that the
// caller waits for the next quiet moment; unless the access goes ahead
// without quiet (starved), when it keeps the lock.
func (s *Store) tryLockSettled(ctx context.Context, f *os.File, exclusive bool) error {
	if err := tryLock(f, s.locking, exclusive, false); err != nil || s.settle == nil || s.settle.lastStarve {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if sig := sigOf(&st); sig == s.settle.own || sig == s.settle.foreign {
		now := time.Now()
		in := s.settle.observe(s.path, now, s.unchanged)
		in.waiting = s.settle.since
		in.deadline, _ = ctx.Deadline()
		if s.settle.policy.decideAt(now, in).wait <= 0 {
			return nil
		}
	}
	if err := unlockAny(f, s.locking); err != nil {
		return err
	}
	return errBusy
}

// accessWatch follows the opens and closes of the file with inotify, to
// see the library's accesses as they happen: those of other processes are
// all opens and closes less the Store's own, which it counts itself as it
// makes them (their events are queued by then, and the Store looks at the
// events only between its own calls). Only accesses made on this node are
// seen: on a network file system another node's go unseen, and settling
// falls back on its times.
type accessWatch struct {
	fd       int    // the inotify instance, non-blocking
	wd       int32  // the watch of the file's current inode; -1 if none
	dev, ino uint64 // that inode
	// The Store's own opens and closes of the watched inode since the
	// last look, and its descriptor of it open now (-1 if none).
	ownOpens, ownCloses int
	ownFd               int
	// open is how many accesses of other processes are under way; opened
	// counts those begun; opensAtChange is opened when the library's last
	// change was seen.
	open          int
	opened        uint64
	opensAtChange uint64
	looked        time.Time // the last look
	ended         time.Time // an access of another process seen to end as it happened
	active        time.Time // the latest another process may have been at the file
	buf           []byte
}

// newAccessWatch returns a watch, or nil where inotify is not available.
func newAccessWatch() *accessWatch {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil
	}
	w := &accessWatch{fd: fd, wd: -1, ownFd: -1, buf: make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))}
	// A Store has no Close: the descriptor goes with the watch.
	runtime.AddCleanup(w, func(fd int) { unix.Close(fd) }, fd)
	return w
}

// follow watches the inode st describes, the file now at path, if it is
// not the one watched (the library unlinks the transfer file at SCR_Init
// and creates a new one); cur is the Store's open file, nil if none.
func (w *accessWatch) follow(path string, st *unix.Stat_t, cur *os.File) {
	if w.wd >= 0 && st.Dev == w.dev && st.Ino == w.ino {
		return
	}
	if w.wd >= 0 {
		_, _ = unix.InotifyRmWatch(w.fd, uint32(w.wd))
		w.read(time.Now()) // the old inode's last events, and its IN_IGNORED
	}
	w.wd, w.ownOpens, w.ownCloses, w.ownFd, w.open = -1, 0, 0, -1, 0
	wd, err := unix.InotifyAddWatch(w.fd, path, unix.IN_OPEN|unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE)
	if err != nil {
		return
	}
	w.wd, w.dev, w.ino = int32(wd), st.Dev, st.Ino
	// The Store's file, opened before the watch, is closed under it: its
	// close event is the Store's, with no open event to match.
	var cst unix.Stat_t
	if cur != nil && unix.Fstat(int(cur.Fd()), &cst) == nil && cst.Dev == w.dev && cst.Ino == w.ino {
		w.ownFd = int(cur.Fd()) // its close is the Store's
	}
}

// ownOpened counts f, just opened by the Store, if it is the watched inode.
func (w *accessWatch) ownOpened(f *os.File) {
	var st unix.Stat_t
	if w.wd < 0 || unix.Fstat(int(f.Fd()), &st) != nil || st.Dev != w.dev || st.Ino != w.ino {
		return
	}
	w.ownOpens++
	w.ownFd = int(f.Fd())
}

// ownClosing counts the close of f if its open was counted.
func (w *accessWatch) ownClosing(f *os.File) {
	if w.ownFd >= 0 && int(f.Fd()) == w.ownFd {
		w.ownCloses++
		w.ownFd = -1
	}
}

// read takes in the events queued since the last look, at now. An access
// of another process that ended since is dated at the last look if that
// was a moment ago (a waiting access looks every settlePoll); otherwise it
// ended at an unknown moment before now, which only moves active.
func (w *accessWatch) read(now time.Time) {
	opens, closes := 0, 0
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			break
		}
		o, c := w.parse(w.buf[:n])
		opens, closes = opens+o, closes+c
	}
	// Another process's access opened before the watch closes without an
	// open counted: the count of those under way stays at zero or more.
	fo, fc := max(opens-w.ownOpens, 0), max(closes-w.ownCloses, 0)
	w.ownOpens, w.ownCloses = 0, 0
	w.opened += uint64(fo)
	w.open = max(w.open+fo-fc, 0)
	switch {
	case fc > 0 && w.open == 0 && !w.looked.IsZero() && now.Sub(w.looked) <= witnessed:
		// Seen while an access waits, looking every settlePoll: the end
		// came after the last look, which is taken as its time (the
		// window after it is then the shorter).
		w.ended, w.active = w.looked, w.looked
	case fo > 0 || fc > 0 || w.open > 0:
		w.active = now
	}
	w.looked = now
}

// parse counts the opens and closes of the watched inode in b.
func (w *accessWatch) parse(b []byte) (opens, closes int) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(b[12:]))
		if size > len(b) {
			break
		}
		b = b[size:]
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			// Events lost: what is under way is unknown; a new count
			// begins with the next change of inode or overflow.
			w.open = 0
		case wd != w.wd:
		case mask&unix.IN_OPEN != 0:
			opens++
		case mask&(unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE) != 0:
			closes++
		}
	}
	return opens, closes
}

// errBusy is a lock another process holds.
var errBusy = errors.New("lock held by another process")
