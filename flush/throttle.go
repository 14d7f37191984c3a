package flush

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/scr-transferd/scr-transferd/flush/autobw"
)

const (
	// minChunk is the smallest chunk a bandwidth-limited copy moves at once.
	minChunk = 16 << 10
	// chunksPerSecond sizes chunks under a bandwidth limit: each is about
	// 1/64 s of transfer, so a limit change applies within a few milliseconds.
	chunksPerSecond = 64
	// burstSeconds is how much transfer the token bucket may hold. It lets a
	// copy catch up after an fsync stall of up to this long, and bounds the
	// excess over any 5 s window to burstSeconds/5 = 2.5 % (plus one chunk,
	// 0.3 %). The bucket starts empty and does not fill while no copy is
	// under way, so a flush never starts with a burst.
	burstSeconds = 0.125
	// maxBurst keeps the bucket size within int range on any platform.
	maxBurst = 1 << 30
	// minPause is the shortest PERCENT pause: idle time owed is paid once it
	// reaches this much (or pauseFor's more at a low PERCENT), so a pause
	// is long enough for its timer's lateness not to matter.
	minPause = 5 * time.Millisecond
	// burstWork is the working time between two pauses that pauseFor aims
	// at: short enough that any 1 s window holds within a point of PERCENT
	// whatever its alignment, long enough that at a low PERCENT the daemon
	// does not wake every few milliseconds (each wake-up costs the runtime
	// CPU time of its own, which a finer cycle would add to the share).
	burstWork = 8 * time.Millisecond
	// maxCredit is the most idle time the duty cycle banks: a timer that
	// fires late is credited to the next pause, while a long idle spell buys
	// no burst of work.
	maxCredit = minPause
	// autoNotify is the rise of the BW auto rate at which copies waiting
	// under the old rate re-plan.
	autoNotify = 1.25
)

// Throttle limits the bandwidth and the share of wall time of every copy
// that uses it. One Throttle is shared by all copies of a daemon; it is safe
// for concurrent use, and its settings may be changed at any time. Create it
// with NewThrottle; a nil *Throttle given to NewCopier means no limits.
//
// Work under the throttle is announced with Begin and ended with Work.End;
// every moment between the two that is not a throttle pause counts as
// working time (reading, writing, fsyncing, verifying, recording progress).
//
// BW is a token bucket over the bytes copied (holes are not copied and do
// not count). PERCENT is a duty cycle: the daemon works at most PERCENT % of
// wall time. While any Work is running the daemon is working; after each
// piece of work Work.Pace pauses every copy until the idle time owed,
// (100-PERCENT)/PERCENT of the working time, is paid. The CPU time the
// process uses is at most its working time per busy thread, so PERCENT bounds
// it too.
//
// BW auto (SetAuto) replaces the fixed rate by the one an autobw.Controller
// sets from the latency of the copy's writes and commits to the
// destination, reported through observe; BW is then its ceiling.
//
// The decisions are made by methods taking the current time (like
// golang.org/x/time/rate's …At methods), so tests drive them with a fake
// clock; the pauses themselves use real timers.
type Throttle struct {
	mu      sync.Mutex
	lim     *rate.Limiter
	bw      float64            // BW: bytes per second; 0 = unlimited
	auto    *autobw.Controller // nil unless BW auto is on
	limit   float64            // the rate in force: bw, or auto's rate; 0 = unlimited
	pct     float64            // fraction of wall time (0..1); 0 = unlimited
	changed chan struct{}      // closed (and replaced) when a setting changes

	burst   time.Duration // burstWork; tests of pausing shorten it
	copies  int           // Works begun and not ended
	working int           // of those, the ones not paused
	last    time.Time     // when debt was last brought up to date
	debt    time.Duration
	// held is the bucket's level when the last copy ended; the bucket does
	// not fill while no copy is under way.
	held float64

	bwSleeps, pctSleeps atomic.Uint64
	bwSlept, pctSlept   atomic.Int64
	measuring           atomic.Bool // auto != nil, read without the lock
	measured            [2]int64    // bytes reported to auto: writes, commits

	abandoned abandonedSyncs // partial copies locked by fsyncs no copy waits for
}

// ThrottleStats counts the pauses a Throttle imposed, for metrics.
type ThrottleStats struct {
	Sleeps        uint64        // pauses of either kind
	Slept         time.Duration // total time paused
	BWSleeps      uint64        // pauses to respect the bandwidth limit
	BWSlept       time.Duration // time paused for the bandwidth limit
	PercentSleeps uint64        // pauses to keep the working share within PERCENT
	PercentSlept  time.Duration // time paused for PERCENT
	// AutoWriteBytes and AutoCommitBytes are the bytes of the writes and
	// commits whose latency was reported to BW auto.
	AutoWriteBytes, AutoCommitBytes int64
}

// NewThrottle returns a Throttle with no limits.
func NewThrottle() *Throttle { return newThrottleAt(time.Now()) }

func newThrottleAt(now time.Time) *Throttle {
	return &Throttle{
		// The limiter is bypassed while bw is 0; it always keeps a finite
		// limit, since rate.Inf makes its token arithmetic produce NaN. It
		// starts empty: see drainLocked.
		lim:     rate.NewLimiter(rate.Limit(minChunk), 0),
		changed: make(chan struct{}),
		last:    now,
		burst:   burstWork,
	}
}

// SetBW sets the bandwidth limit in bytes per second; 0 (or a negative, NaN
// or infinite value) removes it. Copies apply it from their next chunk, and a
// copy waiting under the old limit re-plans at once. Setting the current
// value again changes nothing, so it may be called on every pass.
func (t *Throttle) SetBW(bytesPerSec float64) { t.setBWAt(time.Now(), bytesPerSec) }

func (t *Throttle) setBWAt(now time.Time, bytesPerSec float64) {
	if !(bytesPerSec > 0) || math.IsInf(bytesPerSec, 1) {
		bytesPerSec = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if bytesPerSec == t.bw {
		return // unchanged: leave waiting copies alone
	}
	t.bw = bytesPerSec
	if t.auto != nil {
		t.auto.SetCeilingAt(now, bytesPerSec)
	}
	t.applyLocked(now)
	t.notifyLocked()
}

// applyLocked hands the rate in force, BW or BW auto's, to the bucket.
func (t *Throttle) applyLocked(now time.Time) {
	lim := t.bw
	if t.auto != nil {
		lim = t.auto.Rate()
	}
	old := t.limit
	t.limit = lim
	if lim > 0 {
		t.lim.SetLimitAt(now, rate.Limit(lim))
		t.lim.SetBurstAt(now, t.burstLocked(lim))
		if old == 0 {
			// The bucket filled while it was not in use: no burst.
			t.drainLocked(now, 0)
		}
	}
}

// SetAuto turns BW auto on or off. While on, the rate follows the latency
// of the copy's operations on the destination (see package autobw), BW is
// its ceiling, and PERCENT still applies.
func (t *Throttle) SetAuto(on bool) { t.setAutoAt(time.Now(), on) }

func (t *Throttle) setAutoAt(now time.Time, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if on == (t.auto != nil) {
		return
	}
	t.auto = nil
	if on {
		t.auto = autobw.New(now, t.bw)
	}
	t.measuring.Store(on)
	t.applyLocked(now)
	t.notifyLocked()
}

// AutoRate returns BW auto's rate in force averaged over the last few
// seconds (autobw.AverageTau), for logs and metrics; 0 when BW auto is off.
func (t *Throttle) AutoRate() float64 { return t.autoRateAt(time.Now()) }

func (t *Throttle) autoRateAt(now time.Time) float64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.auto == nil {
		return 0
	}
	return t.auto.AverageAt(now)
}

// clock returns the time an operation on the destination begins, for
// observe; the zero time when BW auto is off, so that an unthrottled copy
// reads no clock it does not need.
func (t *Throttle) clock() time.Time {
	if t == nil || !t.measuring.Load() {
		return time.Time{}
	}
	return time.Now()
}

// observe reports to BW auto an operation on the destination of n bytes
// (written, or made durable by an fsync) begun at start, from clock. It is
// the one place the copy's measurements enter the throttle.
func (t *Throttle) observe(start time.Time, kind autobw.Kind, n int64) {
	if start.IsZero() {
		return
	}
	now := time.Now()
	t.observeAt(now, autobw.Sample{Kind: kind, Bytes: n, Took: now.Sub(start)})
}

func (t *Throttle) observeAt(now time.Time, s autobw.Sample) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.auto == nil || s.Kind < 0 || int(s.Kind) >= len(t.measured) {
		return
	}
	t.measured[s.Kind] += s.Bytes
	old := t.limit
	_, lowered := t.auto.ObserveAt(now, s)
	t.applyLocked(now)

	switch {
	case lowered:
		// Bytes banked at the old rate would go out now, into the queue.
		t.drainLocked(now, 0)
	case t.limit >= old*autoNotify:
		t.notifyLocked()
	}
}

// SetPercent sets the share of wall time, in percent, that the daemon may
// spend working; 0 or 100 and above (or NaN) remove the limit. Setting the
// current value again changes nothing.
func (t *Throttle) SetPercent(p float64) { t.setPercentAt(time.Now(), p) }

func (t *Throttle) setPercentAt(now time.Time, p float64) {
	if !(p > 0) || p >= 100 {
		p = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p/100 == t.pct {
		return // unchanged: a pause in progress keeps its length
	}
	t.advanceLocked(now)
	t.pct, t.debt = p/100, 0
	t.notifyLocked()
}

// Stats returns the pauses imposed so far.
func (t *Throttle) Stats() ThrottleStats {
	t.mu.Lock()
	w, c := t.measured[autobw.Write], t.measured[autobw.Commit]
	t.mu.Unlock()
	s := ThrottleStats{
		AutoWriteBytes:  w,
		AutoCommitBytes: c,
		BWSleeps:        t.bwSleeps.Load(),
		BWSlept:         time.Duration(t.bwSlept.Load()),
		PercentSleeps:   t.pctSleeps.Load(),
		PercentSlept:    time.Duration(t.pctSlept.Load()),
	}
	s.Sleeps = s.BWSleeps + s.PercentSleeps
	s.Slept = s.BWSlept + s.PercentSlept
	return s
}

// notifyLocked wakes every pause so that it re-plans under the new settings.
func (t *Throttle) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// burstFor returns the token bucket size for a limit of bw bytes per second.
// It is at least the largest chunk chunkSize hands out at that limit.
func burstFor(bw float64) int {
	b := math.Max(minChunk, math.Max(bw/chunksPerSecond, bw*burstSeconds))
	return int(math.Min(b, maxBurst))
}

// burstLocked is the bucket size at a limit of lim bytes per second: under
// BW auto one chunk, so that no bytes banked while the destination was idle
// go out at once into a queue that has formed since.
func (t *Throttle) burstLocked(lim float64) int {
	if t.auto != nil {
		return t.auto.Chunk()
	}
	return burstFor(lim)
}

// chunkFor is the chunk moved at once at a limit of lim bytes per second
// (before the buffer's size bounds it): 1/chunksPerSecond of a second, at
// least minChunk. Under BW auto the controller sizes the chunk instead
// (autobw.Controller.Chunk).
func chunkFor(lim float64) int {
	c := math.Max(minChunk, lim/chunksPerSecond)
	return int(math.Min(c, maxBurst))
}

// drainLocked takes from the bucket whatever it holds above level.
func (t *Throttle) drainLocked(now time.Time, level float64) {
	if n := int(t.lim.TokensAt(now) - level); n > 0 {
		t.lim.ReserveN(now, n) // kept, never cancelled
	}
}

// advanceLocked brings the idle time owed up to now: working time adds
// (1-p)/p of itself, idle time pays back one for one, and at most maxCredit
// of idle time is banked.
func (t *Throttle) advanceLocked(now time.Time) {
	el := now.Sub(t.last)
	if el <= 0 {
		return
	}
	t.last = now
	if t.pct == 0 {
		t.debt = 0
		return
	}
	if t.working > 0 {
		t.debt += time.Duration(float64(el) * (1 - t.pct) / t.pct)
	} else {
		t.debt = max(t.debt-el, -maxCredit)
	}
}

// beginAt counts one more copy under way, working.
func (t *Throttle) beginAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(now)
	if t.copies == 0 && t.limit > 0 {
		t.drainLocked(now, t.held) // no filling while idle
	}
	t.copies++
	t.working++
}

// endAt counts one copy less.
func (t *Throttle) endAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(now)
	t.copies--
	t.working--
	if t.copies == 0 {
		t.held = t.lim.TokensAt(now)
	}
}

// idleAt marks one working copy as paused.
func (t *Throttle) idleAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(now)
	t.working--
}

// resumeAt marks one paused copy as working again.
func (t *Throttle) resumeAt(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(now)
	t.working++
}

// pauseAt returns how long every copy must pause, from now, to keep the
// working share within PERCENT (0: none), with the channel closed at the
// next settings change.
func (t *Throttle) pauseAt(now time.Time) (time.Duration, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked(now)
	if t.pct == 0 || t.debt < t.pauseFor(t.pct) {
		return 0, t.changed
	}
	return t.debt, t.changed
}

// pauseFor is the idle time owed at which a copy pauses, at PERCENT p (a
// fraction): the debt t.burst (burstWork) of working time runs up, and at least
// minPause. At 5 % a copy works about 8 ms and pauses 152 ms; at 50 % 8 ms
// and 8 ms; from about 60 % up, minPause sets the period.
func (t *Throttle) pauseFor(p float64) time.Duration {
	return max(minPause, time.Duration(float64(t.burst)*(1-p)/p))
}

// reserveAt reserves up to n bytes under the bandwidth limit. It returns the
// bytes reserved, how long to wait before moving them, the reservation (to
// cancel when the wait is cut short) and the settings-change channel; k = n
// and no reservation when there is no limit.
func (t *Throttle) reserveAt(now time.Time, n int) (int, time.Duration, rate.Reservation, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.limit == 0 {
		return n, 0, rate.Reservation{}, t.changed
	}
	k := min(n, t.lim.Burst())
	r := *t.lim.ReserveN(now, k) // a copy, so that no chunk allocates
	return k, r.DelayFrom(now), r, t.changed
}

// chunkSize returns how many bytes to move at once with a buffer of bufSize
// bytes: the whole buffer when unlimited, else a small fraction of a second
// of transfer at the current limit.
func (t *Throttle) chunkSize(bufSize int) int {
	if t == nil {
		return bufSize
	}
	t.mu.Lock()
	lim, auto := t.limit, 0
	if t.auto != nil {
		auto = t.auto.Chunk()
	}
	t.mu.Unlock()
	switch {
	case auto > 0:
		return min(auto, bufSize)
	case lim == 0:
		return bufSize
	}
	return min(chunkFor(lim), bufSize)
}

// Work is one stream of work under a Throttle: a copy, or a verification.
// It is used by one goroutine at a time. A nil *Work never pauses.
type Work struct {
	t     *Throttle
	timer *time.Timer
	ended bool
}

// Begin starts counting working time for one stream of work; the caller
// calls Pace between pieces of the work and End when it is done. Begin on a
// nil Throttle returns nil, which never pauses.
func (t *Throttle) Begin() *Work {
	if t == nil {
		return nil
	}
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	w := &Work{}
	t.begin(w, tm)
	return w
}

// begin starts w with the timer tm (stopped, drained), so that a Copier
// reuses both from copy to copy.
func (t *Throttle) begin(w *Work, tm *time.Timer) {
	*w = Work{t: t, timer: tm}
	t.beginAt(time.Now())
}

// End stops counting working time for w. It may be called more than once.
func (w *Work) End() {
	if w == nil || w.ended {
		return
	}
	w.ended = true
	w.t.endAt(time.Now())
}

// Pace pauses, when needed, so that the daemon's working share stays within
// PERCENT. It returns early, with ctx.Err(), only when ctx ends.
func (w *Work) Pace(ctx context.Context) error {
	if w == nil {
		return nil
	}
	for {
		d, ch := w.t.pauseAt(time.Now())
		if d <= 0 {
			return nil
		}
		w.t.pctSleeps.Add(1)
		slept, _, err := w.sleep(ctx, d, ch)
		w.t.pctSlept.Add(int64(slept))
		if err != nil {
			return err
		}
	}
}

// Pace pauses the caller while the daemon owes idle time under PERCENT. It
// is for helpers that work beside a Work, such as a checkpoint check reading
// in a goroutine of its own during a copy: their time is counted through that
// Work, and pacing them here keeps them from working through its pauses.
// Their pauses are not counted in Stats, which would count that time twice.
func (t *Throttle) Pace(ctx context.Context) error {
	if t == nil {
		return nil
	}
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		d, ch := t.pauseAt(time.Now())
		if d <= 0 {
			return nil
		}
		tm.Reset(d)
		select {
		case <-tm.C:
		case <-ch:
			tm.Stop()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitBytes blocks until n bytes may be copied under the bandwidth limit.
func (w *Work) waitBytes(ctx context.Context, n int) error {
	if w == nil {
		return nil
	}
	for n > 0 {
		now := time.Now()
		k, d, r, ch := w.t.reserveAt(now, n)
		if d > 0 {
			w.t.bwSleeps.Add(1)
			slept, changed, err := w.sleep(ctx, d, ch)
			w.t.bwSlept.Add(int64(slept))
			if err != nil || changed {
				r.CancelAt(time.Now())
				if err != nil {
					return err
				}
				continue // plan again under the new limit
			}
		}
		n -= k
	}
	return nil
}

// sleep pauses w (its time does not count as working) for d, until ctx
// ends, or until a settings change, whichever comes first. It returns how
// long it paused and whether a change cut it short; only the end of ctx is
// an error. A pause counts as idle up to its deadline only: the time the
// woken thread then takes to run again (the timer's slack, waiting for a
// CPU) is the daemon's, as seen from outside, and counts as working.
func (w *Work) sleep(ctx context.Context, d time.Duration, changed <-chan struct{}) (time.Duration, bool, error) {
	start := time.Now()
	w.t.idleAt(start)
	w.timer.Reset(d)
	select {
	case <-w.timer.C:
		w.t.resumeAt(start.Add(d))
		return time.Since(start), false, nil
	case <-changed:
		w.timer.Stop()
		w.t.resumeAt(time.Now())
		return time.Since(start), true, nil
	case <-ctx.Done():
		w.timer.Stop()
		w.t.resumeAt(time.Now())
		return time.Since(start), false, ctx.Err()
	}
}
