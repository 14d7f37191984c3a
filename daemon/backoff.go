package daemon

import (
	"time"

	"github.com/scr-transferd/scr-transferd/internal/backoff"
)

// retryPolicy is the back-off between attempts on a file in error, and on
// the transfer file while it cannot be read or rewritten: doubling from
// --retry-min up to --retry-max, each wait drawn between half and all of
// it (equal jitter). Thousands of nodes whose attempts failed together (a
// parallel file system outage, a control file system full everywhere)
// thus retry spread over half of their back-off instead of in lockstep,
// and each still waits at least half of it.
func retryPolicy(cfg Settings) backoff.Policy {
	return backoff.Policy{First: cfg.RetryMin, Max: cfg.RetryMax, Factor: 2, Jitter: backoff.Equal}
}

// next takes one more back-off of r under p after a failure at now, u
// being a uniform draw in [0, 1): the wait of its next attempt and when
// that attempt is due.
func (r *retry) next(p backoff.Policy, now time.Time, u float64) {
	r.wait = p.Wait(r.tries, u)
	r.tries++
	r.at = now.Add(r.wait)
}

// afresh is the back-off of a file whose source was replaced during its
// copy at now: the new version is copied from 0 after the first wait of p
// (jittered, as the library may rewrite the sources of every node at
// once), and failures of the new version count from the first back-off
// again.
func afresh(p backoff.Policy, now time.Time, u float64) *retry {
	w := p.Wait(0, u)
	return &retry{wait: w, at: now.Add(w)}
}
