// Package backoff is the one description, in this project, of how long to
// wait before trying again something that failed or was found busy: a
// file's copy in error, the transfer file that cannot be read or
// rewritten, a source replaced during its copy, the transfer file's lock
// and the instance lock held by another process.
//
// A Policy is a plain value; its methods are pure functions of the attempt
// count and, for jittered policies, of a uniform random draw the caller
// passes in. There is no clock inside: a caller that needs a deadline adds
// the wait to its own now, so that every decision can be tested on fixed
// inputs.
package backoff

import (
	"math"
	"time"
)

// Jitter is how a wait is drawn under the ceiling of its attempt.
type Jitter uint8

const (
	// None waits the ceiling itself.
	None Jitter = iota
	// Equal waits a time drawn uniformly from [ceiling/2, ceiling): each
	// waits at least half of its back-off, and many processes that failed
	// at the same moment (thousands of nodes meeting one parallel file
	// system outage) retry spread over the other half, not in lockstep.
	Equal
)

// Policy describes the waits between attempts. Attempts are counted from
// 0: attempt n is the nth retry after the first failure.
//
// The first Spins attempts each come after Spin, neither growing nor
// jittered: for a lock its holder lets go within milliseconds, polled
// often while that is likely. From then on the ceiling of the wait starts
// at First and is multiplied by Factor at each attempt, up to Max; Jitter
// says how the wait is drawn under it.
type Policy struct {
	Spins int
	Spin  time.Duration
	// First is the ceiling of the first wait after the spins.
	First time.Duration
	// Max bounds the ceiling; a Max below First is taken as First, so
	// that a zero Max makes every wait First.
	Max time.Duration
	// Factor multiplies the ceiling at each attempt; 0 is taken as 2, and
	// a factor below 1 as 1 (a constant wait).
	Factor float64
	Jitter Jitter
}

// Ceiling returns the ceiling of the wait before attempt n: Spin for the
// spins, then First × Factor^(n − Spins), at most Max. A negative n is
// taken as 0.
func (p Policy) Ceiling(n int) time.Duration {
	n = max(n, 0)
	if n < p.Spins {
		return p.Spin
	}
	n -= max(p.Spins, 0)
	limit := max(p.Max, p.First)
	factor := p.Factor
	if factor == 0 {
		factor = 2
	}
	factor = max(factor, 1)
	c := float64(p.First) * math.Pow(factor, float64(n))
	if c >= float64(limit) || math.IsNaN(c) {
		return limit
	}
	return time.Duration(c)
}

// Wait returns the wait before attempt n, u being a uniform random draw
// in [0, 1) (clamped to [0, 1]); a policy without jitter ignores u.
func (p Policy) Wait(n int, u float64) time.Duration {
	c := p.Ceiling(n)
	if p.Jitter == None || n < p.Spins {
		return c
	}
	u = min(max(u, 0), 1)
	half := c / 2
	// min: the product, rounded in floating point, may pass the ceiling.
	return half + min(time.Duration(u*float64(c-half)), c-half)
}

// At returns when attempt n is due after a failure at now.
func (p Policy) At(now time.Time, n int, u float64) time.Time {
	return now.Add(p.Wait(n, u))
}
