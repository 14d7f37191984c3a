package flush

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
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
	// 0.3 %).
	burstSeconds = 0.125
	// maxBurst keeps the bucket size within int range on any platform.
	maxBurst = 1 << 30
	// cpuWindow bounds how long the CPU governor remembers: idle time older
	// than this is never credited to later work.
	cpuWindow = time.Second
)

// Throttle limits the bandwidth and the CPU share of every copy that uses it.
// One Throttle is shared by all copies of a daemon; it is safe for concurrent
// use, and its settings may be changed at any time. Create it with
// NewThrottle; a nil *Throttle given to NewCopier means no limits.
type Throttle struct {
	lim *rate.Limiter
	bw  atomic.Uint64 // math.Float64bits of bytes per second; 0 = unlimited
	pct atomic.Uint64 // math.Float64bits of the CPU fraction (0..1); 0 = unlimited

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) when a setting changes
	winWall time.Time     // start of the CPU accounting window
	winCPU  time.Duration // process CPU time at winWall

	bwSleeps, cpuSleeps atomic.Uint64
	bwSlept, cpuSlept   atomic.Int64
}

// ThrottleStats counts the pauses a Throttle imposed, for metrics.
type ThrottleStats struct {
	Sleeps    uint64        // pauses of either kind
	Slept     time.Duration // total time paused
	BWSleeps  uint64        // pauses to respect the bandwidth limit
	BWSlept   time.Duration // time paused for the bandwidth limit
	CPUSleeps uint64        // pauses to respect the CPU share
	CPUSlept  time.Duration // time paused for the CPU share
}

// NewThrottle returns a Throttle with no limits.
func NewThrottle() *Throttle {
	t := &Throttle{
		// The limiter is bypassed while bw is 0; it always keeps a finite
		// limit, since rate.Inf makes its token arithmetic produce NaN.
		lim:     rate.NewLimiter(rate.Limit(minChunk), minChunk),
		changed: make(chan struct{}),
	}
	t.winWall, t.winCPU = time.Now(), processCPU()
	return t
}

// SetBW sets the bandwidth limit in bytes per second; 0 (or a negative, NaN
// or infinite value) removes it. Copies apply it from their next chunk, and a
// copy waiting under the old limit re-plans at once. Setting the current
// value again changes nothing, so it may be called on every pass.
func (t *Throttle) SetBW(bytesPerSec float64) {
	if !(bytesPerSec > 0) || math.IsInf(bytesPerSec, 1) {
		bytesPerSec = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if math.Float64bits(bytesPerSec) == t.bw.Load() {
		return // unchanged: leave waiting copies alone
	}
	t.bw.Store(math.Float64bits(bytesPerSec))
	if bytesPerSec > 0 {
		now := time.Now()
		t.lim.SetLimitAt(now, rate.Limit(bytesPerSec))
		t.lim.SetBurstAt(now, burstFor(bytesPerSec))
	}
	t.notifyLocked()
}

// SetPercent sets the share of CPU time, in percent, that the process may use
// while copying; 0 or 100 and above (or NaN) remove the limit. The share is the
// process's user+system CPU time (getrusage) over wall-clock time, within a
// window of about a second, so idle time is not banked for long. Setting the
// current value again changes nothing.
func (t *Throttle) SetPercent(p float64) {
	if !(p > 0) || p >= 100 {
		p = 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if math.Float64bits(p/100) == t.pct.Load() {
		return // unchanged: a pause in progress keeps its length
	}
	t.pct.Store(math.Float64bits(p / 100))
	t.winWall, t.winCPU = time.Now(), processCPU()
	t.notifyLocked()
}

// Stats returns the pauses imposed so far.
func (t *Throttle) Stats() ThrottleStats {
	s := ThrottleStats{
		BWSleeps:  t.bwSleeps.Load(),
		BWSlept:   time.Duration(t.bwSlept.Load()),
		CPUSleeps: t.cpuSleeps.Load(),
		CPUSlept:  time.Duration(t.cpuSlept.Load()),
	}
	s.Sleeps = s.BWSleeps + s.CPUSleeps
	s.Slept = s.BWSlept + s.CPUSlept
	return s
}

// notifyLocked wakes every pause so that it re-plans under the new settings.
func (t *Throttle) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// changedCh returns the channel closed at the next settings change.
func (t *Throttle) changedCh() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// burstFor returns the token bucket size for a limit of bw bytes per second.
// It is at least the largest chunk chunkSize hands out at that limit.
func burstFor(bw float64) int {
	b := math.Max(minChunk, math.Max(bw/chunksPerSecond, bw*burstSeconds))
	return int(math.Min(b, maxBurst))
}

// chunkSize returns how many bytes to move at once with a buffer of bufSize
// bytes: the whole buffer when unlimited, else a small fraction of a second
// of transfer at the current limit.
func (t *Throttle) chunkSize(bufSize int) int {
	if t == nil {
		return bufSize
	}
	bw := math.Float64frombits(t.bw.Load())
	if bw == 0 {
		return bufSize
	}
	c := math.Max(minChunk, bw/chunksPerSecond)
	if c < float64(bufSize) {
		return int(c)
	}
	return bufSize
}

// waitBytes blocks until n bytes may be copied under the bandwidth limit.
// tm is the caller's reusable timer (stopped, drained).
func (t *Throttle) waitBytes(ctx context.Context, n int, tm *time.Timer) error {
	if t == nil {
		return nil
	}
	for n > 0 {
		ch := t.changedCh() // before reading the settings, so no change is missed
		if t.bw.Load() == 0 {
			return nil
		}
		k := min(n, t.lim.Burst())
		now := time.Now()
		r := t.lim.ReserveN(now, k)
		if !r.OK() {
			continue // the burst shrank between Burst and ReserveN
		}
		if d := r.DelayFrom(now); d > 0 {
			t.bwSleeps.Add(1)
			changed, err := sleep(ctx, d, tm, ch)
			t.bwSlept.Add(int64(time.Since(now)))
			if err != nil {
				r.Cancel()
				return err
			}
			if changed {
				r.Cancel() // plan again under the new limit
				continue
			}
		}
		n -= k
	}
	return nil
}

// governCPU pauses until the process's CPU share over the current window is
// within the limit.
func (t *Throttle) governCPU(ctx context.Context, tm *time.Timer) error {
	if t == nil || t.pct.Load() == 0 {
		return nil
	}
	d, ch := t.cpuDelay()
	if d <= 0 {
		return nil
	}
	t.cpuSleeps.Add(1)
	start := time.Now()
	_, err := sleep(ctx, d, tm, ch)
	t.cpuSlept.Add(int64(time.Since(start)))
	return err
}

// PaceCPU pauses, when needed, so that the process keeps within the
// PERCENT share. Work other than copies that the share must cover, such as
// checkpoint verification, calls it between pieces.
func (t *Throttle) PaceCPU(ctx context.Context) error {
	if t == nil || t.pct.Load() == 0 {
		return nil
	}
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	return t.governCPU(ctx, tm)
}

// cpuDelay returns how long to pause so that CPU/wall over the window does not
// exceed the limit, and starts a new window once the current one is older
// than cpuWindow.
func (t *Throttle) cpuDelay() (time.Duration, <-chan struct{}) {
	cpu := processCPU()
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := math.Float64frombits(t.pct.Load())
	if p == 0 {
		return 0, t.changed
	}
	wall := now.Sub(t.winWall)
	var d time.Duration
	if used := cpu - t.winCPU; used > 0 {
		if need := time.Duration(float64(used) / p); need > wall {
			d = need - wall
		}
	}
	if wall+d >= cpuWindow {
		// The pause pays for this window; the next one starts after it.
		t.winWall, t.winCPU = now.Add(d), cpu
	}
	return d, t.changed
}

// sleep waits for d, for ctx to end, or for a settings change, whichever
// comes first. It reports whether a change cut it short; only the end of ctx
// is an error.
func sleep(ctx context.Context, d time.Duration, tm *time.Timer, changed <-chan struct{}) (bool, error) {
	tm.Reset(d)
	select {
	case <-tm.C:
		return false, nil
	case <-changed:
		tm.Stop()
		return true, nil
	case <-ctx.Done():
		tm.Stop()
		return false, ctx.Err()
	}
}

// processCPU returns the user+system CPU time the process has used so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
