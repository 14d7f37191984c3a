package testenv

import (
	"testing"
	"time"
)

// PollInterval is how often WaitFor and Until evaluate their condition,
// and the shortest interval of UntilEvery.
const PollInterval = 5 * time.Millisecond

// clock is the time source of a poll: the real one in tests, a fake one
// in the tests of the poll itself.
type clock struct {
	now   func() time.Time
	sleep func(time.Duration)
}

// realClock is the wall clock.
func realClock() clock { return clock{now: time.Now, sleep: time.Sleep} }

// poll evaluates cond every interval until it holds, and reports whether
// it did before giving up. Its last evaluation starts at or after the
// deadline, so a condition that becomes true just as time runs out is
// still seen, and a condition is always evaluated at least once.
func poll(c clock, interval, timeout time.Duration, cond func() bool) bool {
	deadline := c.now().Add(timeout)
	for {
		late := !c.now().Before(deadline)
		if cond() {
			return true
		}
		if late {
			return false
		}
		c.sleep(min(interval, deadline.Sub(c.now())))
	}
}

// Until polls cond until it holds or timeout has passed, and reports
// whether it held. Use it where a timeout is an outcome the test handles
// itself, or where the failure message needs more than WaitFor gives.
func Until(timeout time.Duration, cond func() bool) bool {
	return poll(realClock(), PollInterval, timeout, cond)
}

// UntilEvery is Until evaluating cond every interval instead of every
// PollInterval: for a condition that costs a command (sinfo, systemctl)
// or a service's work to evaluate.
func UntilEvery(interval, timeout time.Duration, cond func() bool) bool {
	return poll(realClock(), max(interval, PollInterval), timeout, cond)
}

// WaitFor polls cond until it holds, and fails tb with "timed out after
// timeout waiting for what" if it still does not hold once timeout has
// passed. cond runs on the test's goroutine, so it may itself fail tb
// (for example when the process it waits on has exited).
func WaitFor(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	if !Until(timeout, cond) {
		tb.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
