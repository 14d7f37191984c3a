// Package rate estimates a copy rate from a byte count that grows in steps:
// the WRITTEN of a transfer file, or the bytes the daemon made durable,
// both advance once per commit (an fsync of the destination), every 64 MiB
// or 2 s by default. A rate between two readings would jump between zero
// and several times the true rate; Meter smooths the commits with an
// exponentially weighted moving average instead. It is the one rate of the
// project: scr-ctl status and the daemon's metrics both use it.
package rate

import (
	"math"
	"time"
)

// DefaultTau is the smoothing time constant: a change of pace shows
// (1 - 1/e) of itself after this long.
const DefaultTau = 10 * time.Second

// Meter is the smoothed rate of one growing count. The zero value is not
// ready: use New. A Meter is not safe for concurrent use.
type Meter struct {
	tau time.Duration

	first    time.Time // first reading: start of Elapsed and Average
	firstN   int64
	last     time.Time // the last commit (or, before the first, the last reading)
	lastN    int64
	moved    bool    // a commit has been seen since the baseline
	ewma     float64 // bytes/s, valid when moved
	interval float64 // smoothed seconds between commits, valid when moved
	seen     bool
	latest   time.Time
	latestN  int64
}

// New returns a Meter smoothing over tau (DefaultTau if tau <= 0).
func New(tau time.Duration) *Meter {
	if tau <= 0 {
		tau = DefaultTau
	}
	return &Meter{tau: tau}
}

// Observe records the count n read at time at. A count that grew is a
// commit: the bytes since the previous commit over the time since it are
// one rate sample, weighted by its length (1 - e^(-dt/tau)), so that
// irregular commits weigh what they last. Until the count first moves the
// baseline follows the readings, so a file waiting for its turn does not
// count its wait. A count that went down (an entry reset, a file copied
// again) starts the meter afresh; a reading not after the last is ignored.
func (m *Meter) Observe(at time.Time, n int64) {
	switch {
	case !m.seen || n < m.latestN:
		*m = Meter{tau: m.tau, first: at, firstN: n, last: at, lastN: n, seen: true, latest: at, latestN: n}
		return
	case !at.After(m.latest):
		return
	}
	m.latest, m.latestN = at, n
	if n == m.lastN {
		if !m.moved {
			m.last = at
		}
		return
	}
	dt := at.Sub(m.last).Seconds()
	sample := float64(n-m.lastN) / dt
	if !m.moved {
		m.ewma, m.interval, m.moved = sample, dt, true
	} else {
		w := 1 - math.Exp(-dt/m.tau.Seconds())
		m.ewma += w * (sample - m.ewma)
		m.interval += w * (dt - m.interval)
	}
	m.last, m.lastN = at, n
}

// Rate returns the smoothed rate at time now, and false until a commit has
// been seen. When no commit has come for longer than the usual interval
// between commits, the rate decays towards zero as if the missing commits
// were samples of zero: a stalled copy does not keep showing its old pace.
func (m *Meter) Rate(now time.Time) (float64, bool) {
	if !m.moved {
		return 0, false
	}
	r := m.ewma
	if late := now.Sub(m.last).Seconds() - m.interval; late > 0 {
		r *= math.Exp(-late / m.tau.Seconds())
	}
	return r, true
}

// Elapsed returns the time from the first reading (since the last reset)
// to now.
func (m *Meter) Elapsed(now time.Time) time.Duration {
	if !m.seen {
		return 0
	}
	return now.Sub(m.first)
}

// Average returns the count's growth per second from the first reading to
// the latest one, and false until time has passed between them.
func (m *Meter) Average() (float64, bool) {
	if !m.seen {
		return 0, false
	}
	dt := m.latest.Sub(m.first).Seconds()
	if dt <= 0 {
		return 0, false
	}
	return float64(m.latestN-m.firstN) / dt, true
}
