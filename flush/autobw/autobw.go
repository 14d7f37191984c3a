// Package autobw is the controller behind `scr-transferd --bw auto`: a
// delay-based scavenger in the manner of LEDBAT (RFC 6817), applied to the
// writes and commits (fsync) a flush makes to its destination instead of to
// packets.
//
// The copy reports how long each write and each commit took and how many
// bytes it carried. The controller keeps, per kind of operation and size
// class, the lowest latency per byte seen recently (the base: the
// destination serving this daemon alone) and compares each new sample with
// it. While the added delay stays under the target the rate grows
// additively, in proportion to how far under it is; when it rises above,
// someone else is queueing at the destination and the rate is divided by
// the latency's ratio to the base (at least halved). Others' load on a
// shared file system comes and goes in bursts (an application's write and
// fsync every few hundred milliseconds): once a sample shows the queue gone,
// the rate returns at once to where it was before the queue, so that the
// flush fills the gaps between the bursts instead of ramping up through
// them. The controller also sizes each write (Chunk): large while the
// destination is calm, small within a second of a queue, so that a write
// of ours in service when another writer's request arrives delays it
// little, and smaller still at a low rate, so that the writes probing for
// the end of a queue come often and add next to nothing to it. The rate
// stays between a floor that keeps a flush moving and the ceiling (SCR's
// BW when set).
//
// The Controller is a pure function of the samples and of the times it is
// given (like golang.org/x/time/rate's …At methods): it reads no clock and
// does no I/O, so tests drive it on a fake clock.
package autobw

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// Kind is the kind of operation a Sample measured.
type Kind int

const (
	// Write is a write(2) of copied bytes to the destination.
	Write Kind = iota
	// Commit is an fsync(2) of the destination file; its bytes are those
	// written since the previous commit of that file (what it had to make
	// durable), since an fsync's latency grows with the dirty data.
	Commit
	kinds
)

// Sample is one operation on the destination, as the copy measured it.
type Sample struct {
	Kind  Kind
	Bytes int64         // bytes written, or made durable by the commit
	Took  time.Duration // how long the call took
}

const (
	// Floor is the lowest rate, in bytes per second: a flush keeps moving
	// however busy the destination is (1 MiB/s per node is a small share
	// of any parallel file system), and keeps producing samples that tell
	// when the load is gone.
	Floor = 1 << 20
	// Start is the rate before the first sample, when nothing is known of
	// the destination yet.
	Start = 16 << 20
	// Target is the added delay tolerated, as a fraction of the base: a
	// fraction rather than a fixed time because the latency per byte of a
	// write differs by orders of magnitude between a page cache, a disk and
	// a network file system; at 2, a queue of up to twice our own service
	// time, others' requests wait at most about twice as long again behind
	// ours, while the scheduling noise of a loaded node (latencies of twice
	// the best are common with more runnable threads than CPUs) stays below.
	// For a write the fraction is of the base of a ContentionChunk write,
	// whatever its own size: a queue adds the same time to any write; a
	// large write's long service time must not hide it, nor a small one's
	// short service time make a fraction of a millisecond of scheduling
	// noise look like a queue.
	Target = 2.0
	// NoiseFloor is the least time the delay is a fraction of: the
	// scheduling noise of a busy node, a millisecond or two whatever the
	// destination's speed, must not look like a queue on a fast one.
	NoiseFloor = 2 * time.Millisecond
	// Decrease is the largest factor applied to the rate when the delay
	// is above Target, at most once per sample that began after the last
	// decrease (samples already under way reflect the old rate). A longer
	// delay cuts deeper: at a latency k times the base, the destination
	// serves others k-1 bytes for each of ours, and the rate is divided by
	// k, so that one or two samples bring it down to what is left.
	Decrease = 0.5
	// RampTime is how long the additive increase takes to add the
	// destination's whole capacity: an application's burst of writes
	// leaves the destination idle again within a fraction of a second,
	// and the flush should use that time.
	RampTime = 50 * time.Millisecond
	// MaxStep bounds the time one sample's increase is credited for, so
	// that a sample after a long wait (a slow commit, an idle spell) does
	// not jump the rate up.
	MaxStep = RampTime / 4
	// Headroom is how far above the measured capacity the rate may go:
	// above that the limit binds nothing, and a rate far above it would
	// take many halvings to come down when load appears.
	Headroom = 2.0
	// MinSampleBytes and MinSampleTime make a sample: operations are
	// summed until they reach either, so that the latency of many tiny
	// operations (the files of a batch of small files) is measured over a
	// few of them, while one operation that took MinSampleTime, such as a
	// probe waiting behind a queue, is a sample at once.
	MinSampleBytes = 32 << 10
	MinSampleTime  = 5 * time.Millisecond
	// BaseBucket and BaseBuckets make the base history, as LEDBAT's: the
	// minimum of each BaseBucket, over the last BaseBuckets of them, so the
	// base follows a destination that became slower (or faster) within a
	// minute, while a load of a few seconds never becomes the base.
	BaseBucket  = 10 * time.Second
	BaseBuckets = 6
	// Filter is how many consecutive samples must be delayed above Target
	// for a decrease (the delay is the least of theirs): one sample delayed
	// by a scheduling hiccup is not taken for a queue. Consecutive samples
	// of any size, not of one size class: the probe that follows a delayed
	// write is smaller than it.
	Filter = 2
	// Clear is the delay, as a fraction of the base, under which a sample
	// shows the queue gone: the rate then returns to the one before the
	// decreases the queue caused.
	Clear = Target / 2
	// Calm is how long after the last sample delayed above Target (and
	// after the start, before anything is known) writes stay small.
	Calm = time.Second
	// LargeChunk is the write size while the destination is calm, as an
	// unthrottled copy writes (the copy's default buffer): each write has
	// a cost of its own, which a large one keeps small beside its transfer.
	LargeChunk = 1 << 20
	// ContentionChunk is the write size within Calm of a queue: a write of
	// ours in service when another writer's request arrives delays it by
	// at most this much transfer; the write after it, a probe once the
	// first was seen delayed, by little more.
	ContentionChunk = 128 << 10
	// ProbeChunk is the largest write within Calm of a queue at a rate
	// below ProbeRate, or after a sample delayed above Target: at such a
	// rate ContentionChunk writes would come tens of milliseconds apart,
	// and the end of a queue be seen that late. A probe carries
	// ProbeSpacing of transfer at the rate in force, at least MinProbe, so
	// that at the floor too the probes come a few milliseconds apart and
	// each adds next to nothing to the queue it waits in.
	ProbeChunk   = 32 << 10
	ProbeRate    = 64 * ContentionChunk // 8 MiB/s
	ProbeSpacing = 4 * time.Millisecond
	MinProbe     = 4 << 10
	// ChunkTime is the most transfer one write carries at the rate in
	// force.
	ChunkTime = time.Second / 16
	// AverageTau is the time constant of Average, the rate reported in
	// logs and metrics: the rate in force changes every few milliseconds.
	AverageTau = 5 * time.Second
)

// classes is how many size classes the base is kept for: a class is a
// factor of four in size, from minClassBytes up.
const (
	classes       = 12
	minClassBytes = 4 << 10
)

// Controller decides the rate of a flush from the latency of its
// operations on the destination. Use New; it is not safe for concurrent
// use (the throttle calls it under its lock).
type Controller struct {
	ceiling float64 // bytes/s, 0 = none
	rate    float64 // bytes/s, within [floor, ceiling]

	base    [kinds][classes]history
	pending [kinds]pending // small samples summed so far

	last      time.Time       // the last sample
	decrease  time.Time       // the last decrease
	congested time.Time       // the last sample whose own delay was above Target
	peak      float64         // the rate before the decreases since the last clear sample, 0 = none
	suspect   bool            // the last sample's own delay was above Target
	owns      [Filter]float64 // the last samples' own delays, newest first

	avg   float64 // Average's state
	avgAt time.Time
}

// New returns a Controller at the Start rate (or the ceiling, when lower),
// with no history, at time now. ceiling is the BW limit in bytes per second,
// 0 for none.
func New(now time.Time, ceiling float64) *Controller {
	c := &Controller{rate: Start, avgAt: now, congested: now, last: now}
	c.SetCeilingAt(now, ceiling)
	c.avg = c.rate
	return c
}

// SetCeilingAt sets the ceiling (SCR's BW), in bytes per second; 0, a
// negative, NaN or infinite value removes it.
func (c *Controller) SetCeilingAt(now time.Time, ceiling float64) {
	if !(ceiling > 0) || math.IsInf(ceiling, 1) {
		ceiling = 0
	}
	c.advance(now)
	c.ceiling = ceiling
	c.rate = c.clamp(c.rate)
}

// Rate returns the rate in force, in bytes per second.
func (c *Controller) Rate() float64 { return c.rate }

// floor is Floor, or the ceiling when that is lower.
func (c *Controller) floor() float64 {
	if c.ceiling > 0 {
		return min(Floor, c.ceiling)
	}
	return Floor
}

// clamp brings r within the floor and the ceiling, and within Headroom of
// the capacity measured.
func (c *Controller) clamp(r float64) float64 {
	if capa := c.capacity(); capa > 0 {
		r = min(r, Headroom*capa)
	}
	if c.ceiling > 0 {
		r = min(r, c.ceiling)
	}
	return max(r, c.floor())
}

// ObserveAt takes one sample measured at now (when the operation ended)
// and returns the rate in force after it, and whether it was lowered.
func (c *Controller) ObserveAt(now time.Time, s Sample) (rate float64, decreased bool) {
	s, ops, began, ok := c.gather(now, s)
	if !ok {
		return c.rate, false
	}
	c.advance(now)
	delay, own := c.record(now, s.Kind, s.Bytes/ops, float64(max(s.Took, 1))/float64(s.Bytes))
	dt := min(now.Sub(c.last), MaxStep)
	c.last = now
	if c.suspect = own > Target; c.suspect {
		c.congested = now
	}
	if delay > Target {
		return c.rate, c.decreaseAt(now, began, delay)
	}
	c.increase(dt, delay, own)
	return c.rate, false
}

// gather sums operations of one kind into a sample: it returns the sample
// once it is complete, with how many operations it sums and when the first
// began.
func (c *Controller) gather(now time.Time, s Sample) (Sample, int64, time.Time, bool) {
	if s.Kind < 0 || s.Kind >= kinds || s.Bytes <= 0 || s.Took < 0 {
		return s, 0, time.Time{}, false
	}
	p := &c.pending[s.Kind]
	if p.ops == 0 {
		p.since = now.Add(-s.Took)
	}
	p.bytes += s.Bytes
	p.took += s.Took
	p.ops++
	if p.bytes < min(MinSampleBytes, int64(c.Chunk())) && p.took < MinSampleTime {
		return s, 0, time.Time{}, false
	}
	sum, ops, began := Sample{Kind: s.Kind, Bytes: p.bytes, Took: p.took}, p.ops, p.since
	*p = pending{}
	return sum, ops, began, true
}

// decreaseAt lowers the rate after a sample, begun at began, whose delay
// was above Target, unless it began before the last decrease; it tells
// whether the rate was lowered.
func (c *Controller) decreaseAt(now, began time.Time, delay float64) bool {
	if began.Before(c.decrease) {
		return false // began under the old rate
	}
	if c.peak == 0 {
		c.peak = c.rate
	}
	c.decrease = now
	old := c.rate
	c.rate = c.clamp(c.rate * min(Decrease, 1/(1+delay)))
	return c.rate < old
}

// increase raises the rate after a sample whose delay was within Target,
// dt after the previous one: back to the rate before the last queue once
// the delay is within Clear, else additively, in proportion to how far the
// delay is below Target (LEDBAT's off_target).
func (c *Controller) increase(dt time.Duration, delay, own float64) {
	if own <= Clear && c.peak > 0 {
		c.rate = c.clamp(max(c.rate, c.peak))
		c.peak = 0
		return
	}
	if dt <= 0 {
		return
	}
	base := c.capacity()
	if base == 0 {
		base = c.rate
	}
	off := min(1, max(0, (Target-delay)/Target))
	c.rate = c.clamp(c.rate + off*base*dt.Seconds()/RampTime.Seconds())
}

// Chunk is how many bytes one write should carry under BW auto: each
// write is a probe of the destination's queue as well as a load on it.
// While no queue was seen for Calm, LargeChunk, as an unthrottled copy
// writes; within Calm of a queue, ContentionChunk, so that a write in
// service when another writer's request arrives delays it little; right
// after a delayed sample, and below ProbeRate, a probe (ProbeChunk or
// less), so that the writes that tell whether a queue is there, and when
// it is gone, come every few milliseconds and add next to nothing to it.
//
// A write carries at most ChunkTime of transfer at the rate in force (and
// at least ProbeChunk), so that a ceiling far below the destination's
// capacity is kept smoothly.
func (c *Controller) Chunk() int {
	n := ContentionChunk
	switch {
	case c.suspect:
		return c.probe()
	case c.last.Sub(c.congested) >= Calm:
		n = LargeChunk
	case c.rate < ProbeRate:
		return c.probe()
	}
	return max(ProbeChunk, min(n, int(c.rate*ChunkTime.Seconds())))
}

// probe is the size of a write probing for the end of a queue.
func (c *Controller) probe() int {
	n := int(c.rate*ProbeSpacing.Seconds()) &^ (MinProbe - 1)
	return min(max(n, MinProbe), ProbeChunk)
}

// pending sums small samples of one kind until they reach MinSampleBytes
// or MinSampleTime.
type pending struct {
	bytes int64
	took  time.Duration
	ops   int64
	since time.Time // when the first operation began
}

// record adds a per-byte latency v of operations of op bytes of kind k to
// their class and returns the added delay, as a fraction of the base (for
// writes, of a ContentionChunk write's, see Target): filtered, the least of
// the last Filter samples', which a decrease needs; and this sample's own,
// which a recovery needs, since a sample from before a queue must not tell
// that it is gone.
func (c *Controller) record(now time.Time, k Kind, op int64, v float64) (delay, own float64) {
	cl := class(op)
	h := &c.base[k][cl]
	h.add(now, v)
	b, ref := h.base(), 0.0
	if k == Write {
		ref = c.base[Write][class(ContentionChunk)].base() * ContentionChunk
	}
	if ref > 0 && op < ContentionChunk && (b <= 0 || b*float64(op) > ref) {
		// A smaller write takes no longer than a ContentionChunk one: a
		// class whose first samples waited behind a queue, or that has
		// none yet, is judged by that.
		b = ref / float64(op)
	}
	if b <= 0 {
		return 0, 0
	}
	scale := b * float64(op)
	if ref > 0 {
		scale = ref
	}
	scale = max(scale, float64(NoiseFloor))
	own = (v - b) * float64(op) / scale
	copy(c.owns[1:], c.owns[:len(c.owns)-1])
	c.owns[0] = own
	return slices.Min(c.owns[:]), own
}

// class is the size class of operations of n bytes each: a summed sample
// of small operations is compared with others of their size, since a
// per-operation cost weighs more on each of their bytes.
func class(n int64) int {
	k := (bits.Len64(uint64(n)) - bits.Len64(minClassBytes)) / 2
	return min(max(k, 0), classes-1)
}

// capacity estimates what the destination serves this daemon alone, in
// bytes per second: the inverse of the lowest base latency per byte of a
// write plus that of a commit. 0 until a write was measured.
func (c *Controller) capacity() float64 {
	w, cm := c.lowestBase(Write), c.lowestBase(Commit)
	if w <= 0 {
		return 0
	}
	return float64(time.Second) / (w + max(cm, 0))
}

// lowestBase is the lowest base over the classes of kind k, 0 if none.
func (c *Controller) lowestBase(k Kind) float64 {
	lo := 0.0
	for i := range c.base[k] {
		if b := c.base[k][i].base(); b > 0 && (lo == 0 || b < lo) {
			lo = b
		}
	}
	return lo
}

// advance brings Average's moving average up to now.
func (c *Controller) advance(now time.Time) {
	dt := now.Sub(c.avgAt)
	if dt <= 0 {
		return
	}
	w := 1 - math.Exp(-dt.Seconds()/AverageTau.Seconds())
	c.avg += w * (c.rate - c.avg)
	c.avgAt = now
}

// AverageAt returns the rate in force averaged over about AverageTau up to
// now, for logs and metrics. It does not change the controller's decisions.
func (c *Controller) AverageAt(now time.Time) float64 {
	c.advance(now)
	return c.avg
}

// Significant tells whether the average rate cur differs enough from the
// one last logged, logged, to be logged again: by a quarter or more (0
// means nothing was logged yet).
func Significant(logged, cur float64) bool {
	if logged <= 0 {
		return cur > 0
	}
	return cur >= logged*1.25 || cur <= logged/1.25
}

// history is the base of one class: the minimum per-byte latency of each
// BaseBucket, for the last BaseBuckets of them.
type history struct {
	start time.Time // start of the current bucket
	cur   int       // index of the current bucket in mins
	mins  [BaseBuckets]float64
}

// add records v at now, starting new buckets as time passed.
func (h *history) add(now time.Time, v float64) {
	if h.start.IsZero() || now.Sub(h.start) >= BaseBuckets*BaseBucket {
		*h = history{start: now}
	}
	for now.Sub(h.start) >= BaseBucket {
		h.cur = (h.cur + 1) % BaseBuckets
		h.mins[h.cur] = 0
		h.start = h.start.Add(BaseBucket)
	}
	if m := h.mins[h.cur]; m == 0 || v < m {
		h.mins[h.cur] = v
	}
}

// base returns the lowest of the buckets' minima, 0 if there are none.
func (h *history) base() float64 {
	lo := 0.0
	for _, m := range h.mins {
		if m > 0 && (lo == 0 || m < lo) {
			lo = m
		}
	}
	return lo
}
