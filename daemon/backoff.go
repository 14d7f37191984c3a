package daemon

import "time"

// backoffCeiling is the back-off after a failure, given the one before (0
// for the first failure): it doubles from lo, up to hi.
func backoffCeiling(prev, lo, hi time.Duration) time.Duration {
	return min(max(prev*2, lo), hi)
}

// jittered is the wait before the next attempt under a back-off ceiling:
// drawn uniformly from [ceiling/2, ceiling) with u uniform in [0, 1).
// Thousands of nodes whose copies failed together (a parallel file system
// outage) thus retry spread over half of their back-off instead of in
// lockstep, and each still waits at least half of it ("equal jitter").
func jittered(ceiling time.Duration, u float64) time.Duration {
	u = min(max(u, 0), 1)
	half := ceiling / 2
	return half + time.Duration(u*float64(ceiling-half))
}
