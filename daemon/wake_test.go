package daemon

import (
	"testing"
	"time"
)

// TestWakeClockNext: what is due at a fixed instant, and when the loop
// must next wake up, from the clock alone.
func TestWakeClockNext(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	idle := wakeClock{reread: time.Minute, lastPass: t0, lastTurn: t0}
	with := func(c wakeClock, f func(*wakeClock)) wakeClock { f(&c); return c }
	copying := func(c *wakeClock) { c.copyingSince, c.lastReport, c.lastProgress = t0, t0, t0 }
	for _, tc := range []struct {
		name string
		c    wakeClock
		now  time.Time
		due  wakeups
		next time.Time // when nothing is due
	}{
		{"idle: the re-read only", idle, at(time.Second), wakeups{}, at(time.Minute)},
		{"idle: the re-read due", idle, at(time.Minute), wakeups{pass: true}, time.Time{}},
		{"a retry before the re-read", with(idle, func(c *wakeClock) { c.retryAt = at(3 * time.Second) }),
			at(time.Second), wakeups{}, at(3 * time.Second)},
		{"a retry due", with(idle, func(c *wakeClock) { c.retryAt = at(3 * time.Second) }),
			at(3 * time.Second), wakeups{pass: true}, time.Time{}},
		{"a retry due before the last pass began was that pass's", with(idle, func(c *wakeClock) {
			c.lastPass, c.retryAt = at(5*time.Second), at(3*time.Second)
		}), at(6 * time.Second), wakeups{}, at(65 * time.Second)},
		{"a retry after the re-read waits for it", with(idle, func(c *wakeClock) { c.retryAt = at(2 * time.Minute) }),
			at(time.Second), wakeups{}, at(time.Minute)},
		{"the heartbeat wakes an idle loop", with(idle, func(c *wakeClock) { c.beat = 15 * time.Second; c.lastTurn = at(10 * time.Second) }),
			at(10 * time.Second), wakeups{}, at(25 * time.Second)},
		{"copying: a report every second", with(idle, copying), at(500 * time.Millisecond), wakeups{}, at(time.Second)},
		{"copying: the report due", with(idle, copying), at(time.Second), wakeups{report: true}, time.Time{}},
		{"copying: the report after the last one", with(idle, func(c *wakeClock) { copying(c); c.lastReport = at(4200 * time.Millisecond) }),
			at(5 * time.Second), wakeups{}, at(5200 * time.Millisecond)},
		{"copying: a progress line due with the report", with(idle, func(c *wakeClock) { copying(c); c.progress = time.Second }),
			at(time.Second), wakeups{report: true, progress: true}, time.Time{}},
		{"copying: a progress line every 30 s", with(idle, func(c *wakeClock) {
			copying(c)
			c.progress, c.lastReport = 30*time.Second, at(29500*time.Millisecond)
		}), at(30 * time.Second), wakeups{progress: true}, time.Time{}},
		{"copying: everything due at once", with(idle, func(c *wakeClock) {
			copying(c)
			c.progress, c.retryAt = time.Second, at(time.Second)
		}), at(time.Minute), wakeups{pass: true, report: true, progress: true}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, next := tc.c.next(tc.now)
			if due != tc.due {
				t.Errorf("due %+v at %v; want %+v", due, tc.now.Sub(t0), tc.due)
			}
			if !tc.due.any() && !next.Equal(tc.next) {
				t.Errorf("next wake-up at %v; want %v", next.Sub(t0), tc.next.Sub(t0))
			}
		})
	}
}

// TestWakeClockCopying: the report and progress periods count from the
// start of a copy, go on while it runs, and stop while idle.
func TestWakeClockCopying(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	c := wakeClock{reread: time.Minute, progress: 10 * time.Second, lastPass: t0, lastTurn: t0}
	c.copying(true, t0.Add(7*time.Second))
	if _, next := c.next(t0.Add(7 * time.Second)); !next.Equal(t0.Add(8 * time.Second)) {
		t.Errorf("first report at %v; want 1 s after the copy began (8s)", next.Sub(t0))
	}
	c.lastReport = t0.Add(8 * time.Second)
	c.copying(true, t0.Add(8*time.Second)) // still the same copy
	if !c.copyingSince.Equal(t0.Add(7 * time.Second)) {
		t.Errorf("a copy under way restarted its periods at %v", c.copyingSince.Sub(t0))
	}
	if due, _ := c.next(t0.Add(17 * time.Second)); !due.progress {
		t.Errorf("no progress line 10 s after the copy began: %+v", due)
	}
	c.copying(false, t0.Add(20*time.Second))
	if due, next := c.next(t0.Add(20 * time.Second)); due.any() || !next.Equal(t0.Add(time.Minute)) {
		t.Errorf("idle: due %+v, next %v; want nothing until the re-read at 1m0s", due, next.Sub(t0))
	}
}
