package autobw

import (
	"math"
	"slices"
	"testing"
	"time"
)

// The tests drive the controller on a fake clock: time passes only as the
// test says.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	mb    = 1e6
	chunk = 128 << 10
)

// dest is a simulated destination serving capa bytes/s to this daemon
// alone; while busy(t) another writer queues larger requests there, and
// each write of ours waits Target+1 times its own time (or NoiseFloor) more.
type dest struct {
	capa float64
	busy func(t time.Time) bool
}

// point is the rate in force at one moment of a simulation.
type point struct {
	at   time.Time
	rate float64
}

// run copies through c from start until end, one chunk at a time, each
// chunk starting once the rate in force allows it (chunk/rate after the
// previous one began) and its write done; it returns the rate after every
// sample.
func (d dest) run(c *Controller, start, end time.Time) []point {
	var trace []point
	now := start
	for now.Before(end) {
		took := time.Duration(float64(chunk) / d.capa * float64(time.Second))
		if d.busy != nil && d.busy(now) {
			took += time.Duration(float64(max(took, NoiseFloor)) * (Target + 1))
		}
		pace := time.Duration(float64(chunk) / c.Rate() * float64(time.Second))
		done := now.Add(took)
		r, _ := c.ObserveAt(done, Sample{Kind: Write, Bytes: chunk, Took: took})
		trace = append(trace, point{done, r})
		now = now.Add(max(pace, took))
	}
	return trace
}

// at returns the rate in force at t in trace.
func at(trace []point, t time.Time) float64 {
	r := 0.0
	for _, p := range trace {
		if p.at.After(t) {
			break
		}
		r = p.rate
	}
	return r
}

// between returns the lowest and highest rate in force from a to b.
func between(trace []point, a, b time.Time) (lo, hi float64) {
	lo = math.Inf(1)
	for _, p := range trace {
		if p.at.Before(a) || p.at.After(b) {
			continue
		}
		lo, hi = min(lo, p.rate), max(hi, p.rate)
	}
	return lo, hi
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// TestRateFollowsTheDestination runs the controller against simulated
// destinations and checks the rate in force over time.
func TestRateFollowsTheDestination(t *testing.T) {
	busyBetween := func(a, b float64) func(time.Time) bool {
		return func(t time.Time) bool { s := t.Sub(t0).Seconds(); return s >= a && s < b }
	}
	tests := []struct {
		name    string
		d       dest
		ceiling float64
		end     float64
		check   func(t *testing.T, trace []point)
	}{
		{"increase: an idle destination is used whole within a second", dest{capa: 100 * mb}, 0, 2,
			func(t *testing.T, trace []point) {
				if r := at(trace, t0.Add(sec(1))); r < 100*mb {
					t.Errorf("rate after 1 s is %.1f MB/s, want at least the capacity, 100 MB/s", r/mb)
				}
				for i := 1; i < len(trace); i++ {
					if trace[i].rate < trace[i-1].rate {
						t.Fatalf("rate went down from %.1f to %.1f MB/s at %v with no delay", trace[i-1].rate/mb, trace[i].rate/mb, trace[i].at.Sub(t0))
					}
				}
				if _, hi := between(trace, t0, t0.Add(sec(2))); hi > Headroom*100*mb*1.001 {
					t.Errorf("rate rose to %.1f MB/s, above %g × the capacity", hi/mb, Headroom)
				}
			}},
		{"ceiling: never above BW", dest{capa: 100 * mb}, 30 * mb, 2,
			func(t *testing.T, trace []point) {
				if _, hi := between(trace, t0, t0.Add(sec(2))); hi > 30*mb {
					t.Errorf("rate rose to %.1f MB/s, above the ceiling of 30 MB/s", hi/mb)
				}
				if r := at(trace, t0.Add(sec(2))); r != 30*mb {
					t.Errorf("rate at the end is %.1f MB/s, want the ceiling, 30 MB/s", r/mb)
				}
			}},
		{"decrease and floor: a destination busy for good", dest{capa: 100 * mb, busy: busyBetween(1, 10)}, 0, 3,
			func(t *testing.T, trace []point) {
				lo, hi := between(trace, t0.Add(sec(1.5)), t0.Add(sec(3)))
				if hi > 20*mb {
					t.Errorf("rate reached %.1f MB/s while the destination was busy, want it well below the capacity of 100 MB/s", hi/mb)
				}
				if lo < Floor {
					t.Errorf("rate fell to %.0f B/s, below the floor %d", lo, Floor)
				}
			}},
		{"step: load appears, then disappears", dest{capa: 100 * mb, busy: busyBetween(2, 4)}, 0, 6,
			func(t *testing.T, trace []point) {
				if r := at(trace, t0.Add(sec(1.99))); r < 100*mb {
					t.Errorf("rate before the load is %.1f MB/s, want at least 100", r/mb)
				}
				if _, hi := between(trace, t0.Add(sec(2.1)), t0.Add(sec(4))); hi > 20*mb {
					t.Errorf("rate reached %.1f MB/s 0.1 s into the load, want it well below 100", hi/mb)
				}
				if r := at(trace, t0.Add(sec(4.5))); r < 100*mb {
					t.Errorf("rate 0.5 s after the load ended is %.1f MB/s, want at least 100", r/mb)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t0, tt.ceiling)
			tt.check(t, tt.d.run(c, t0, t0.Add(sec(tt.end))))
		})
	}
}

// TestDecrease: a delayed sample divides the rate by its latency over the
// base (at least halving it); a sample that began before that decrease
// does not lower it again; one that began after does.
func TestDecrease(t *testing.T) {
	c := New(t0, 0)
	base := MinSampleTime // one write, one sample
	// slow is a write delayed by one base more than the target.
	slow := base + time.Duration(float64(base)*(Target+1))
	now := t0
	for range 100 { // at the base: up to the capacity
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, chunk, base})
	}
	for i := range Filter - 1 {
		now = now.Add(10 * time.Millisecond)
		if _, lowered := c.ObserveAt(now, Sample{Write, chunk, slow}); lowered {
			t.Fatalf("delayed sample %d of %d lowered the rate: one sample is not a queue", i+1, Filter)
		}
	}
	r0 := c.Rate()
	f := min(Decrease, 1/(Target+2)) // a latency of k × the base leaves us 1/k
	steps := []struct {
		name    string
		after   time.Duration // since the previous sample ended
		took    time.Duration
		want    float64 // rate after, as a fraction of r0
		lowered bool
	}{
		{"delay above the target", 10 * time.Millisecond, slow, f, true},
		{"began before the decrease", time.Millisecond, slow, f, false},
		{"began after the decrease", 30 * time.Millisecond, slow, f * f, true},
		{"delay within the target: no decrease", 30 * time.Millisecond, base + time.Duration(float64(base)*Target*0.9), -1, false},
	}
	for _, s := range steps {
		before := c.Rate()
		now = now.Add(s.after)
		r, lowered := c.ObserveAt(now, Sample{Write, chunk, s.took})
		if lowered != s.lowered {
			t.Errorf("%s: lowered = %v, want %v", s.name, lowered, s.lowered)
		}
		if s.want > 0 && math.Abs(r-r0*s.want) > 1 {
			t.Errorf("%s: rate %.0f, want %.0f (%g × %.0f)", s.name, r, r0*s.want, s.want, r0)
		}
		if s.want < 0 && r < before {
			t.Errorf("%s: rate went down from %.0f to %.0f", s.name, before, r)
		}
	}
}

// TestBaseTracking: the base is the lowest latency per byte of the recent
// buckets; it drops at once to a lower one, and rises to a higher one only
// once every bucket that saw the old one has passed.
func TestBaseTracking(t *testing.T) {
	c := New(t0, 0)
	perByte := func(c *Controller) time.Duration {
		return time.Duration(c.lowestBase(Write) * chunk)
	}
	now := t0
	feed := func(d time.Duration, took time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(100 * time.Millisecond) {
			c.ObserveAt(now, Sample{Write, chunk, took})
		}
	}
	feed(5*time.Second, 2*time.Millisecond)
	if b := perByte(c); b != 2*time.Millisecond {
		t.Fatalf("base after 5 s at 2 ms is %v", b)
	}
	feed(time.Second, time.Millisecond)
	if b := perByte(c); b != time.Millisecond {
		t.Fatalf("base after a 1 ms sample is %v, want 1ms at once", b)
	}
	feed(30*time.Second, 4*time.Millisecond) // the destination got slower
	if b := perByte(c); b != time.Millisecond {
		t.Fatalf("base 30 s after the change is %v, want the old 1ms still", b)
	}
	feed(BaseBuckets*BaseBucket, 4*time.Millisecond)
	if b := perByte(c); b != 4*time.Millisecond {
		t.Fatalf("base %v after the change is %v, want 4ms", BaseBuckets*BaseBucket, b)
	}
	// At the new base the rate grows again.
	r := c.Rate()
	feed(time.Second, 4*time.Millisecond)
	if c.Rate() < r {
		t.Errorf("rate went down from %.0f to %.0f at the new base", r, c.Rate())
	}
}

// TestSmallOperations: small writes are summed into samples of at least
// MinSampleBytes and compared with samples of their own size, so the cost
// of each operation does not read as delay beside large writes.
func TestSmallOperations(t *testing.T) {
	c := New(t0, 0)
	now := t0
	for range 200 {
		now = now.Add(2 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, chunk, time.Millisecond}) // 7.6 ns/byte
		for range 32 {
			now = now.Add(100 * time.Microsecond)
			// 4 KiB in 100 µs: 24 ns/byte, three times a chunk's.
			if _, lowered := c.ObserveAt(now, Sample{Write, 4 << 10, 100 * time.Microsecond}); lowered {
				t.Fatalf("small writes at their usual latency lowered the rate at %v", now.Sub(t0))
			}
		}
	}
	if c.Rate() <= Start {
		t.Errorf("rate %.0f did not grow above the start %d", c.Rate(), Start)
	}
}

// TestCeilingAndFloor checks the bounds whatever the samples say.
func TestCeilingAndFloor(t *testing.T) {
	tests := []struct {
		name      string
		ceiling   float64
		took      time.Duration // after a first sample of 1 ms
		wantLo    float64
		wantHi    float64
		finalWant float64
	}{
		{"congested, no ceiling: the floor", 0, 10 * time.Millisecond, Floor, Headroom * chunk / 1e-3, Floor},
		{"congested, ceiling below the floor: the ceiling", 512 << 10, 10 * time.Millisecond, 512 << 10, 512 << 10, 512 << 10},
		{"idle, ceiling: the ceiling", 40 * mb, time.Millisecond, Start, 40 * mb, 40 * mb},
		{"idle, no ceiling: Headroom × capacity", 0, time.Millisecond, Start, Headroom * chunk / 1e-3, Headroom * chunk / 1e-3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t0, tt.ceiling)
			now := t0
			for range 10 {
				now = now.Add(20 * time.Millisecond)
				c.ObserveAt(now, Sample{Write, chunk, time.Millisecond})
			}
			for range 2000 {
				now = now.Add(20 * time.Millisecond)
				r, _ := c.ObserveAt(now, Sample{Write, chunk, tt.took})
				if r < tt.wantLo-1 || r > tt.wantHi+1 {
					t.Fatalf("rate %.0f outside [%.0f, %.0f] at %v", r, tt.wantLo, tt.wantHi, now.Sub(t0))
				}
			}
			if r := c.Rate(); math.Abs(r-tt.finalWant) > 1 {
				t.Errorf("final rate %.0f, want %.0f", r, tt.finalWant)
			}
		})
	}
}

// TestSetCeiling: lowering the ceiling lowers the rate at once; removing
// it lets the rate grow again.
func TestSetCeiling(t *testing.T) {
	c := New(t0, 0)
	dest{capa: 100 * mb}.run(c, t0, t0.Add(time.Second))
	if c.Rate() < 100*mb {
		t.Fatalf("rate %.0f before the ceiling", c.Rate())
	}
	c.SetCeilingAt(t0.Add(time.Second), 10*mb)
	if c.Rate() != 10*mb {
		t.Fatalf("rate %.0f after setting a ceiling of 10 MB/s", c.Rate())
	}
	c.SetCeilingAt(t0.Add(time.Second), math.NaN())
	dest{capa: 100 * mb}.run(c, t0.Add(time.Second), t0.Add(2*time.Second))
	if c.Rate() < 100*mb {
		t.Errorf("rate %.0f a second after the ceiling was removed", c.Rate())
	}
}

// TestAverage: the average follows the rate in force with AverageTau.
func TestAverage(t *testing.T) {
	c := New(t0, 10*mb)
	if a := c.AverageAt(t0); a != 10*mb {
		t.Fatalf("average at the start %.0f, want the rate", a)
	}
	c.SetCeilingAt(t0, 5*mb)
	a := c.AverageAt(t0.Add(AverageTau))
	want := 5*mb + 5*mb/math.E
	if math.Abs(a-want) > 1 {
		t.Errorf("average after one time constant %.0f, want %.0f", a, want)
	}
}

func TestSignificant(t *testing.T) {
	tests := []struct {
		logged, cur float64
		want        bool
	}{
		{0, 10, true},
		{100, 100, false},
		{100, 124, false},
		{100, 125, true},
		{100, 81, false},
		{100, 80, true},
	}
	for _, tt := range tests {
		if got := Significant(tt.logged, tt.cur); got != tt.want {
			t.Errorf("Significant(%g, %g) = %v, want %v", tt.logged, tt.cur, got, tt.want)
		}
	}
}

// FuzzObserve: whatever the samples, the rate stays a finite number within
// the floor and the ceiling, and the chunk within MinProbe and LargeChunk.
func FuzzObserve(f *testing.F) {
	f.Add(int64(chunk), int64(time.Millisecond), int64(time.Millisecond), uint8(0), 0.0)
	f.Add(int64(1), int64(0), int64(0), uint8(1), 1e6)
	f.Add(int64(1<<40), int64(time.Hour), int64(-5), uint8(7), -3.0)
	f.Fuzz(func(t *testing.T, bytes, took, gap int64, kind uint8, ceiling float64) {
		c := New(t0, ceiling)
		now := t0
		for i := range 50 {
			now = now.Add(time.Duration(gap))
			r, _ := c.ObserveAt(now, Sample{Kind(kind % 3), bytes >> (i % 8), time.Duration(took) * time.Duration(i%3)})
			lo, hi := float64(Floor), math.Inf(1)
			if ceiling > 0 && !math.IsInf(ceiling, 1) {
				lo, hi = min(lo, ceiling), ceiling
			}
			if math.IsNaN(r) || r < lo || r > hi {
				t.Fatalf("rate %v outside [%v, %v]", r, lo, hi)
			}
			if ch := c.Chunk(); ch < MinProbe || ch > LargeChunk {
				t.Fatalf("chunk %d outside [MinProbe, LargeChunk]", ch)
			}
		}
	})
}

// TestRecovery: once a sample shows the queue gone (delay within Clear),
// the rate returns at once to where it was before the decreases the queue
// caused; a sample still delayed, though within Target, only adds.
func TestRecovery(t *testing.T) {
	const base = 5 * time.Millisecond // one write, one sample
	queued := base + time.Duration(float64(base)*(Target+3))
	tests := []struct {
		name    string
		took    time.Duration // the sample after the queue
		restore bool
	}{
		{"clear: back to the rate before the queue", base, true},
		{"within Clear", base + time.Duration(float64(base)*Clear*0.9), true},
		{"delayed within Target: additive", base + time.Duration(float64(base)*(Clear+Target)/2), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t0, 0)
			now := t0
			for range 100 {
				now = now.Add(10 * time.Millisecond)
				c.ObserveAt(now, Sample{Write, chunk, base})
			}
			before := c.Rate()
			for range 2 * Filter {
				now = now.Add(queued)
				c.ObserveAt(now, Sample{Write, chunk, queued})
			}
			if c.Rate() > before/4 {
				t.Fatalf("rate %.0f after the queue, want well below %.0f", c.Rate(), before)
			}
			low := c.Rate()
			now = now.Add(tt.took)
			r, _ := c.ObserveAt(now, Sample{Write, chunk, tt.took})
			if tt.restore && r != before {
				t.Errorf("rate %.0f after the sample, want %.0f, the rate before the queue", r, before)
			}
			if !tt.restore && (r >= before/2 || r <= low) {
				t.Errorf("rate %.0f after the sample, want an additive step up from %.0f", r, low)
			}
		})
	}
}

// TestChunk: writes carry LargeChunk once no queue was seen for Calm,
// ContentionChunk within Calm of one (and in the first Calm, before any
// is known), and a probe right after a delayed sample or when the rate is
// below ProbeRate; never more than ChunkTime of transfer at the rate in
// force.
func TestChunk(t *testing.T) {
	const base = 4 * time.Millisecond // above NoiseFloor
	tests := []struct {
		name    string
		ceiling float64
		calm    bool            // first, samples at base for Calm
		then    []time.Duration // then samples taking these, each begun as the last ended
		want    int
		wantLo  bool // the rate is below ProbeRate
	}{
		{"start", 0, false, nil, ContentionChunk, false},
		{"calm under a low ceiling: ChunkTime of transfer", 2 << 20, true, nil, int(2 << 20 * ChunkTime.Seconds()), true},
		{"calm for Calm", 0, true, nil, LargeChunk, false},
		{"a queue gone, rate above ProbeRate", 0, true, []time.Duration{4 * base, 4 * base, base}, ContentionChunk, false},
		{"one delayed sample: a probe next", 0, true, []time.Duration{4 * base}, ProbeChunk, false},
		{"one delayed sample, then a clear one: small writes for Calm", 0, true, []time.Duration{4 * base, base}, ContentionChunk, false},
		{"a long queue, rate below ProbeRate", 0, true, slices.Repeat([]time.Duration{20 * base}, 20), MinProbe, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(t0, tt.ceiling)
			now := t0
			for tt.calm && now.Sub(t0) <= Calm {
				now = now.Add(10 * time.Millisecond)
				c.ObserveAt(now, Sample{Write, chunk, base})
			}
			for _, took := range tt.then {
				now = now.Add(max(10*time.Millisecond, took))
				c.ObserveAt(now, Sample{Write, chunk, took})
			}
			if got := c.Chunk(); got != tt.want {
				t.Errorf("chunk %d at a rate of %.0f, want %d", got, c.Rate(), tt.want)
			}
			if lo := c.Rate() < ProbeRate; lo != tt.wantLo {
				t.Errorf("rate %.0f: below ProbeRate %v, want %v", c.Rate(), lo, tt.wantLo)
			}
		})
	}
}

// TestLargeWritesSeeAQueue: the delay of a write larger than
// ContentionChunk is measured against the base latency of a
// ContentionChunk write, not its own: a queue of another writer's requests
// adds the same time to every write, and a large write must not hide it
// behind its own long service time.
func TestLargeWritesSeeAQueue(t *testing.T) {
	const large = 1 << 20
	c := New(t0, 0)
	now := t0
	const cbase = 4 * time.Millisecond // a ContentionChunk write's, above NoiseFloor
	perByte := cbase / (ContentionChunk >> 10)
	for range 50 {
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, ContentionChunk, perByte * (ContentionChunk >> 10)})
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, large, perByte * (large >> 10)})
	}
	// A queue of Target+1 ContentionChunk writes' time: well within
	// Target × a large write's own base.
	queue := time.Duration(Target+1) * cbase
	lowered := false
	for range Filter {
		now = now.Add(20 * time.Millisecond)
		_, l := c.ObserveAt(now, Sample{Write, large, perByte*(large>>10) + queue})
		lowered = lowered || l
	}
	if !lowered {
		t.Errorf("large writes each delayed by %v (%.1f × a ContentionChunk write's base) did not lower the rate", queue, float64(queue)/float64(cbase))
	}
}

// TestSlowWriteIsASample: one write that took MinSampleTime or more is a
// sample on its own, however small: a queue is seen after Filter such
// writes, not after enough of them to make MinSampleBytes.
func TestSlowWriteIsASample(t *testing.T) {
	const small = MinSampleBytes / 4
	c := New(t0, 0)
	now := t0
	for range 400 { // at their base: summed into samples of MinSampleBytes
		now = now.Add(time.Millisecond)
		c.ObserveAt(now, Sample{Write, small, 100 * time.Microsecond})
	}
	slow := MinSampleTime + time.Millisecond
	for i := range Filter {
		now = now.Add(slow)
		if _, lowered := c.ObserveAt(now, Sample{Write, small, slow}); lowered {
			return
		}
		if i == Filter-1 {
			t.Errorf("%d writes of %d bytes, each delayed %v (%.0f × their base), did not lower the rate", Filter, small, slow, float64(slow)/float64(100*time.Microsecond))
		}
	}
}

// TestIncreaseOffTarget: with no queue to recover from, the additive
// step is in proportion to how far the delay is below Target (LEDBAT's
// off_target): full at no delay, none at Target.
func TestIncreaseOffTarget(t *testing.T) {
	const base = 5 * time.Millisecond // one write, one sample
	tests := []struct {
		delay float64 // of the last sample, as a fraction of the base
		want  float64 // its step, as a fraction of the step at no delay
	}{
		{0, 1},
		{Target / 4, 0.75},
		{Target / 2, 0.5},
		{Target * 3 / 4, 0.25},
		{Target, 0},
	}
	step := func(delay float64) float64 {
		c := New(t0, 0)
		now := t0
		for range 3 { // the base, well below the capacity's Headroom
			now = now.Add(MaxStep)
			c.ObserveAt(now, Sample{Write, chunk, base})
		}
		r := c.Rate()
		now = now.Add(MaxStep)
		took := base + time.Duration(float64(base)*delay)
		// Filter: as many samples at that delay, the last one counted.
		for range Filter - 1 {
			c.ObserveAt(now, Sample{Write, chunk, took})
			r = c.Rate()
		}
		now = now.Add(MaxStep)
		c.ObserveAt(now, Sample{Write, chunk, took})
		return c.Rate() - r
	}
	full := step(0)
	if full <= 0 {
		t.Fatalf("no increase at no delay")
	}
	for _, tt := range tests {
		if got := step(tt.delay) / full; math.Abs(got-tt.want) > 0.01 {
			t.Errorf("delay %.2f × the base: step %.2f of the full one, want %.2f", tt.delay, got, tt.want)
		}
	}
}

// TestProbe: a probe carries ProbeSpacing of transfer at the rate in
// force, in whole MinProbe units, between MinProbe and ProbeChunk, so that
// probes come a few milliseconds apart at any rate.
func TestProbe(t *testing.T) {
	tests := []struct {
		rate float64
		want int
	}{
		{Floor, MinProbe},
		{2 * Floor, 8 << 10},
		{3 * Floor, 12 << 10},
		{4 * Floor, 16 << 10},
		{ProbeRate, ProbeChunk},
		{1e12, ProbeChunk},
	}
	for _, tt := range tests {
		c := New(t0, 0)
		c.rate = tt.rate
		if got := c.probe(); got != tt.want {
			t.Errorf("probe at %.0f B/s: %d bytes, want %d", tt.rate, got, tt.want)
		}
	}
}

// queueThenLow brings c to a decrease after a queue: writes of
// ContentionChunk at base, then Filter of them delayed. It returns the
// rate before the queue and the time of the last sample.
func queueThenLow(t *testing.T, c *Controller, base time.Duration) (float64, time.Time) {
	t.Helper()
	now := t0
	for range 100 {
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, ContentionChunk, base})
	}
	before := c.Rate()
	queued := base * time.Duration(Target+4)
	for range Filter {
		now = now.Add(queued)
		c.ObserveAt(now, Sample{Write, ContentionChunk, queued})
	}
	if c.Rate() > before/4 {
		t.Fatalf("rate %.0f after the queue, want well below %.0f", c.Rate(), before)
	}
	return before, now
}

// TestFilterAcrossSizes: a delayed write followed by a delayed probe, of
// another size class, is a queue: the filter is over consecutive samples,
// not over the samples of one size.
func TestFilterAcrossSizes(t *testing.T) {
	const base = 4 * time.Millisecond // a ContentionChunk write
	c := New(t0, 0)
	now := t0
	for range 100 {
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, ContentionChunk, base})
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, ProbeChunk, base / 4})
	}
	before := c.Rate()
	queue := base * time.Duration(Target+4)
	now = now.Add(queue)
	if _, lowered := c.ObserveAt(now, Sample{Write, ContentionChunk, base + queue}); lowered {
		t.Fatal("one delayed sample lowered the rate")
	}
	now = now.Add(queue)
	if _, lowered := c.ObserveAt(now, Sample{Write, ProbeChunk, base/4 + queue}); !lowered {
		t.Errorf("a delayed write then a delayed probe left the rate at %.0f (before %.0f)", c.Rate(), before)
	}
}

// TestSmallWriteNoise: the delay of a write smaller than ContentionChunk
// is a fraction of a ContentionChunk write's base, not of its own: a probe
// that took three times its own tiny base, but far less than a
// ContentionChunk write's service time more, shows the queue gone.
func TestSmallWriteNoise(t *testing.T) {
	const base = 4 * time.Millisecond // a ContentionChunk write
	c := New(t0, 0)
	now := t0
	for range 100 { // the probes' own base: 100 µs
		now = now.Add(10 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, ProbeChunk, 100 * time.Microsecond})
	}
	c2 := *c
	before, now := queueThenLow(t, &c2, base)
	now = now.Add(time.Millisecond)
	if r, _ := c2.ObserveAt(now, Sample{Write, ProbeChunk, 300 * time.Microsecond}); r != before {
		t.Errorf("a probe 200 µs over its base (%.2f × a ContentionChunk write's) left the rate at %.0f, want %.0f, the rate before the queue", 0.2e-3/base.Seconds(), r, before)
	}
}

// TestProbeIsASample: a probe smaller than MinSampleBytes, of the size
// Chunk asked for, is a sample on its own: the end of a queue is seen at
// the first probe after it, however low the rate.
func TestProbeIsASample(t *testing.T) {
	const base = 4 * time.Millisecond // a ContentionChunk write
	c := New(t0, 0)
	before, now := queueThenLow(t, c, base)
	for c.Rate() > Floor { // down to the floor, where a probe is MinProbe
		now = now.Add(30 * time.Millisecond)
		c.ObserveAt(now, Sample{Write, int64(c.Chunk()), 20 * base})
	}
	n := c.Chunk()
	if n != MinProbe {
		t.Fatalf("chunk %d at the floor, want MinProbe", n)
	}
	now = now.Add(time.Millisecond)
	if r, _ := c.ObserveAt(now, Sample{Write, int64(n), base / 16}); r != before {
		t.Errorf("a probe of %d bytes at its base left the rate at %.0f, want %.0f, the rate before the queue", n, r, before)
	}
}

// TestNoiseFloor: on a destination so fast that a ContentionChunk write
// takes a fraction of a millisecond, a millisecond of scheduling noise on
// every write is not a queue (the delay is a fraction of NoiseFloor at
// least), while a queue of several NoiseFloors is.
func TestNoiseFloor(t *testing.T) {
	const base = 200 * time.Microsecond // a ContentionChunk write
	feed := func(took time.Duration) (lowered bool) {
		c := New(t0, 0)
		now := t0
		for range 100 {
			now = now.Add(time.Millisecond)
			c.ObserveAt(now, Sample{Write, ContentionChunk, base})
		}
		for range 4 * Filter {
			now = now.Add(time.Millisecond)
			_, l := c.ObserveAt(now, Sample{Write, ContentionChunk, took})
			lowered = lowered || l
		}
		return lowered
	}
	if feed(base + time.Millisecond) {
		t.Errorf("writes %v over their base of %v (%.0f × it) lowered the rate: noise taken for a queue", time.Millisecond, base, float64(time.Millisecond)/float64(base))
	}
	if queue := time.Duration(Target+1) * NoiseFloor; !feed(base + queue) {
		t.Errorf("writes %v over their base did not lower the rate", queue)
	}
}
