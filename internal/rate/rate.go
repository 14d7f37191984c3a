// Package rate estimates a copy rate from a byte count that grows in steps:
// the WRITTEN of a transfer file, or the bytes the daemon made durable,
// both advance once per commit (an fsync of the destination), every 64 MiB
// or 2 s by default. A rate between two readings would jump between zero
// and several times the true rate; Meter averages over the commits of a
// window of about tau instead. It is the one rate of the project: scr-ctl
// status and wait, the daemon's log and its metrics all use it, and
// Average and ETA are the one way to turn bytes and times into an average
// rate and a time left.
//
// The estimate is never above the true rate: a reading only bounds when a
// commit happened (after the last reading that still showed the old count,
// no later than the first that shows the new one), so the bytes of the
// commits after a first one are divided by the longest interval the
// readings allow. The first commit a meter sees is only a starting point:
// when its bytes began to be copied is unknown (the copy may have begun
// long before the first reading), and dividing them by the gap since the
// previous reading would overstate the rate by as much as that gap is
// short.
package rate

import (
	"math"
	"time"
)

// DefaultTau is the span of the window of commits the rate averages over.
const DefaultTau = 10 * time.Second

// commit is a change of the count: it happened after start (the last
// reading that showed the previous count) and no later than at (the first
// reading that showed n).
type commit struct {
	start, at time.Time
	n         int64
}

// Meter is the rate of one growing count. The zero value is not ready:
// use New. A Meter is not safe for concurrent use.
type Meter struct {
	tau time.Duration

	first   time.Time // first reading: start of Elapsed
	seen    bool
	latest  time.Time // the latest reading
	latestN int64
	// commits are the changes of the window, oldest first: the oldest is
	// the window's starting point, its own bytes are not counted.
	commits []commit
	origin  commit // the first commit since the first reading: Average's starting point
	commitN int    // commits since the first reading
}

// New returns a Meter averaging over a window of tau (DefaultTau if tau
// <= 0).
func New(tau time.Duration) *Meter {
	if tau <= 0 {
		tau = DefaultTau
	}
	return &Meter{tau: tau}
}

// Observe records the count n read at time at. A count that grew is a
// commit. A count that went down (an entry reset, a file copied again)
// starts the meter afresh; a reading not after the latest is ignored.
func (m *Meter) Observe(at time.Time, n int64) {
	switch {
	case !m.seen || n < m.latestN:
		*m = Meter{tau: m.tau, first: at, seen: true, latest: at, latestN: n, commits: m.commits[:0]}
		return
	case !at.After(m.latest):
		return
	}
	if n > m.latestN {
		c := commit{start: m.latest, at: at, n: n}
		if m.commitN++; m.commitN == 1 {
			m.origin = c
		}
		m.commits = append(m.commits, c)
		// Keep the newest starting point whose window still spans tau.
		drop := 0
		for len(m.commits)-drop > 2 && at.Sub(m.commits[drop+1].start) >= m.tau {
			drop++
		}
		m.commits = append(m.commits[:0], m.commits[drop:]...)
	}
	m.latest, m.latestN = at, n
}

// Rate returns the rate at time now, and false until two commits have been
// seen: the bytes of the window's commits after its first, over the time
// from the last reading before that first commit to the first reading
// after the last. When no commit has come for longer than the window's
// mean interval between commits, the rate decays by e every tau as if the
// missing commits were samples of zero: a stalled copy does not keep
// showing its old pace.
func (m *Meter) Rate(now time.Time) (float64, bool) {
	r, late, ok := m.window(now)
	if !ok {
		return 0, false
	}
	if late > 0 {
		r *= math.Exp(-late.Seconds() / m.tau.Seconds())
	}
	return r, true
}

// window returns the window's rate and how long its next commit is
// overdue (the time since its last commit beyond the mean interval).
func (m *Meter) window(now time.Time) (r float64, late time.Duration, ok bool) {
	if len(m.commits) < 2 {
		return 0, 0, false
	}
	base, last := m.commits[0], m.commits[len(m.commits)-1]
	span := last.at.Sub(base.start)
	if span <= 0 {
		return 0, 0, false
	}
	interval := span / time.Duration(len(m.commits)-1)
	return Average(last.n-base.n, span), now.Sub(last.at) - interval, true
}

// ETA returns the time needed for left bytes at time now, and false when
// it cannot be told (no rate yet, or a rate of zero). The rate is Rate's,
// at most limit when limit > 0 (a BW in force). The bytes copied since the
// last commit are not counted yet: the time left counts down between
// commits by the time since the last one, up to the mean interval between
// commits; past that the copy is late and the time left grows as the rate
// decays.
func (m *Meter) ETA(now time.Time, left int64, limit float64) (time.Duration, bool) {
	if left <= 0 {
		return 0, true
	}
	r, ok := m.Rate(now)
	if limit > 0 {
		r = min(r, limit)
	}
	if !ok || r <= 0 {
		return 0, false
	}
	_, late, _ := m.window(now)
	since := now.Sub(m.commits[len(m.commits)-1].at)
	if late > 0 {
		since -= late // the mean interval
	}
	s := float64(left)/r - max(since, 0).Seconds()
	return time.Duration(max(s, 0) * float64(time.Second)), true
}

// Elapsed returns the time from the first reading (since the last reset)
// to now.
func (m *Meter) Elapsed(now time.Time) time.Duration {
	if !m.seen {
		return 0
	}
	return now.Sub(m.first)
}

// Average returns the count's growth per second since the first commit,
// to the latest reading, and false until a second commit: like Rate, it
// does not count the first commit's bytes, which may have been copied
// before the first reading.
func (m *Meter) Average() (float64, bool) {
	if m.commitN < 2 {
		return 0, false
	}
	return Average(m.latestN-m.origin.n, m.latest.Sub(m.origin.start)), true
}

// Average returns n bytes over d as bytes per second, 0 when no time has
// passed (d <= 0): the one way the project turns the bytes copied and the
// time they took into an average rate.
func Average(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
