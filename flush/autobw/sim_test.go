package autobw

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// A simulation of the BW auto benchmark (test/bench, section auto) on a
// fake clock: a destination serving every request from one FIFO bucket of
// simCapa bytes/s, an application writing simAppBytes in requests of
// simAppRequest and fsyncing every simAppPeriod, and the daemon copying one
// chunk at a time under the rate in force as flush.Throttle paces it under
// BW auto. The per-request costs outside the bucket are those measured on
// the benchmark's FUSE destination (one writer, no bucket): a fixed cost
// per request and a cost per byte (copying through the kernel, the
// server's timer firing late); the bucket, as internal/fusetest's, absorbs
// a pause of up to simDepth before a request.

const (
	simCapa       = 40e6
	simAppBytes   = 4 << 20
	simAppRequest = 1 << 20 // the FUSE mount's largest write
	simAppPeriod  = 200 * time.Millisecond
	// simBefore and simAfter are a request's fixed cost before it reaches
	// the bucket and after it is served; simPerByte its cost per byte
	// outside the bucket; simLoop the daemon's own time between writes
	// (reading the source, bookkeeping).
	simBefore  = 300 * time.Microsecond
	simAfter   = 250 * time.Microsecond
	simPerByte = 1.2e-3 / (1 << 20) // seconds per byte
	simLoop    = 300 * time.Microsecond
	simFsync   = 500 * time.Microsecond
	// simDepth is the idle time before a request that the bucket absorbs
	// (internal/fusetest's bucketDepth).
	simDepth = 2 * time.Millisecond
	// simBuf is the copy's buffer, the largest write unthrottled.
	simBuf = 1 << 20
)

// simBucket is the destination's FIFO bucket.
type simBucket struct{ next time.Time }

// serve books a request of n bytes arriving at t and returns when it is
// served.
func (b *simBucket) serve(t time.Time, n int) time.Time {
	start := t.Add(-simDepth)
	if b.next.After(start) {
		start = b.next
	}
	b.next = start.Add(simDur(float64(n) / simCapa))
	if b.next.Before(t) {
		return t
	}
	return b.next
}

func simDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// simActor is one writer: the daemon or the application. arrive is when its
// next request reaches the bucket; done is called with when it was served
// and returns the arrival of the next request (false when finished).
type simActor struct {
	arrive time.Time
	active bool
	sizeOf func() int
	done   func(served time.Time) (time.Time, bool)
}

// simRun runs the actors until the first is finished.
func simRun(b *simBucket, actors ...*simActor) {
	for actors[0].active {
		var next *simActor
		for _, a := range actors {
			if a.active && (next == nil || a.arrive.Before(next.arrive)) {
				next = a
			}
		}
		n := next.sizeOf()
		next.arrive, next.active = next.done(b.serve(next.arrive, n))
	}
}

// simFlush is the daemon copying size bytes; with c nil, unthrottled.
type simFlush struct {
	c      *Controller
	size   int64
	copied int64
	tokens float64 // the throttle's bucket, at tokensAt
	at     time.Time
	issued time.Time // when the write under way was issued
	chunk  int
	noise  *rand.Rand
	end    time.Time
	writes []simWrite
}

// simWrite is one of the daemon's writes as the bucket served it.
type simWrite struct {
	served time.Time
	n      int
}

// chunkAt returns the next write's size and when it is issued, after the
// pacing the rate in force asks for, from now: as flush.Throttle does, the
// controller's chunk, with a bucket of one chunk that the throttle drains
// when the rate is lowered.
func (f *simFlush) chunkAt(now time.Time) (int, time.Time) {
	left := f.size - f.copied
	if f.c == nil {
		return int(min(left, simBuf)), now
	}
	r := f.c.Rate()
	n := min(f.c.Chunk(), simBuf)
	burst := float64(n)
	f.tokens = min(burst, f.tokens+now.Sub(f.at).Seconds()*r)
	f.at = now
	n = int(min(int64(n), left))
	f.tokens -= float64(n)
	if f.tokens >= 0 {
		return n, now
	}
	wait := simDur(-f.tokens / r)
	f.tokens, f.at = 0, now.Add(wait)
	return n, now.Add(wait)
}

// start makes the daemon's actor, beginning at t.
func (f *simFlush) start(t time.Time) *simActor {
	a := &simActor{active: true}
	issue := func(now time.Time) (time.Time, bool) {
		if f.copied >= f.size {
			f.end = now
			return now, false
		}
		f.chunk, f.issued = f.chunkAt(now)
		return f.issued.Add(simBefore), true
	}
	a.sizeOf = func() int { return f.chunk }
	a.done = func(served time.Time) (time.Time, bool) {
		f.writes = append(f.writes, simWrite{served, f.chunk})
		ended := served.Add(simAfter + simDur(float64(f.chunk)*simPerByte) + f.jitter())
		f.copied += int64(f.chunk)
		if f.c != nil {
			old := f.c.Rate()
			if _, lowered := f.c.ObserveAt(ended, Sample{Kind: Write, Bytes: int64(f.chunk), Took: ended.Sub(f.issued)}); lowered {
				// The throttle drains its bucket, filled at the old rate
				// up to now.
				if ended.After(f.at) {
					f.tokens += ended.Sub(f.at).Seconds() * old
					f.at = ended
				}
				f.tokens = min(f.tokens, 0)
			}
		}
		return issue(ended.Add(simLoop))
	}
	a.arrive, a.active = issue(t)
	return a
}

// jitter is a scheduling delay: none for most requests, a few for one in
// twenty on a loaded node.
func (f *simFlush) jitter() time.Duration {
	if f.noise == nil || f.noise.IntN(20) != 0 {
		return 0
	}
	return time.Duration(f.noise.ExpFloat64() * float64(2*time.Millisecond))
}

// simApp is the application: from start until stop, every simAppPeriod, a
// write of simAppBytes (in requests of simAppRequest, one after the other)
// and an fsync; it records each operation's latency.
type simApp struct {
	start, stop time.Time
	ops         []time.Duration
	opStart     time.Time
	left        int
	k           int
}

func (p *simApp) actor() *simActor {
	a := &simActor{active: true, arrive: p.start.Add(simBefore)}
	p.opStart, p.left = p.start, simAppBytes
	a.sizeOf = func() int { return min(p.left, simAppRequest) }
	a.done = func(served time.Time) (time.Time, bool) {
		p.left -= min(p.left, simAppRequest)
		ended := served.Add(simAfter + simDur(float64(simAppRequest)*simPerByte))
		if p.left > 0 {
			return ended.Add(simBefore), true
		}
		ended = ended.Add(simFsync)
		p.ops = append(p.ops, ended.Sub(p.opStart))
		p.k++
		next := p.start.Add(time.Duration(p.k) * simAppPeriod)
		if ended.After(next) {
			next = ended
		}
		if !next.Before(p.stop) {
			return next, false
		}
		p.opStart, p.left = next, simAppBytes
		return next.Add(simBefore), true
	}
	return a
}

// p99 returns the 99th percentile of d.
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(float64(len(s))*0.99))-1)]
}

// simResult is one simulated flush.
type simResult struct {
	flush time.Duration
	app   []time.Duration
	f     *simFlush
}

// simulate flushes size bytes from t0, under BW auto unless unthrottled,
// with the application writing from appFrom to appTo after the start (none
// when appTo is 0).
func simulate(size int64, auto bool, appFrom, appTo time.Duration, seed uint64) simResult {
	f := &simFlush{size: size, at: t0, noise: rand.New(rand.NewPCG(seed, 1))}
	if auto {
		f.c = New(t0, 0)
	}
	b := &simBucket{}
	actors := []*simActor{f.start(t0)}
	var app *simApp
	if appTo > 0 {
		app = &simApp{start: t0.Add(appFrom), stop: t0.Add(appTo)}
		actors = append(actors, app.actor())
	}
	simRun(b, actors...)
	r := simResult{flush: f.end.Sub(t0), f: f}
	if app != nil {
		r.app = app.ops
	}
	return r
}

// simAlone returns the application's latencies alone over n periods.
func simAlone(n int) []time.Duration {
	app := &simApp{start: t0, stop: t0.Add(time.Duration(n) * simAppPeriod)}
	a := app.actor()
	simRun(&simBucket{}, a)
	return app.ops
}

// recovered returns how long after from the flush's rate, over a window
// of w, first reached rate; false if it never did.
func (f *simFlush) recovered(from time.Time, w time.Duration, rate float64) (time.Duration, bool) {
	for i, a := range f.writes {
		if a.served.Before(from) {
			continue
		}
		n := 0
		for _, b := range f.writes[i+1:] {
			n += b.n
			if el := b.served.Sub(a.served); el >= w {
				if float64(n)/el.Seconds() >= rate {
					return b.served.Sub(from), true
				}
				break
			}
		}
	}
	return 0, false
}
