package daemon

import "time"

// reportEvery is how often a status report, and the throttle's and BW
// auto's lines, are made while a copy is under way; never while idle.
const reportEvery = time.Second

// wakeups is what the loop must do at an instant of its own choosing,
// beyond the events it waits for (a change of the transfer file, a copy's
// result, a signal, the instance lock lost).
type wakeups struct {
	pass     bool // read the transfer file: the periodic re-read, or a retry due
	report   bool // a status report, throttle and BW auto lines (while copying)
	progress bool // a progress line in the log (while copying)
}

func (w wakeups) any() bool { return w.pass || w.report || w.progress }

// wakeClock is when the loop last did what it must do periodically, and
// the periods: from it and the current time, next tells what is due and
// when the loop must next wake up, so that the loop waits on one timer.
type wakeClock struct {
	reread   time.Duration // a pass at least this often (--reread)
	beat     time.Duration // an idle loop's heartbeat period, 0: none
	progress time.Duration // a progress line this often while copying, 0: none

	lastPass time.Time // the last pass over the transfer file began
	lastTurn time.Time // the loop's last turn (its heartbeat)
	// retryAt is the earliest retry due (a file's back-off, a refusal to
	// work out again, the transfer file itself while unusable), zero if
	// none. A retry that came due before the last pass began was that
	// pass's to take; it does not wake the loop again.
	retryAt time.Time
	// copyingSince is when the copy under way began, zero while idle;
	// lastReport and lastProgress when the last report and progress line
	// of that copy were made (copyingSince before the first).
	copyingSince, lastReport, lastProgress time.Time
}

// copying tells the clock whether a copy is under way at now: the report
// and progress periods count from the start of a copy.
func (c *wakeClock) copying(on bool, now time.Time) {
	switch {
	case on && c.copyingSince.IsZero():
		c.copyingSince, c.lastReport, c.lastProgress = now, now, now
	case !on:
		c.copyingSince, c.lastReport, c.lastProgress = time.Time{}, time.Time{}, time.Time{}
	}
}

// next returns what is due at now and, if nothing is, the instant of the
// earliest next action (the re-read, a retry, a report, a progress line,
// the heartbeat). It is a pure function of the clock and now.
func (c wakeClock) next(now time.Time) (wakeups, time.Time) {
	var due wakeups
	at := c.lastPass.Add(c.reread)
	due.pass = !now.Before(at)
	if !c.retryAt.IsZero() && c.retryAt.After(c.lastPass) {
		due.pass = due.pass || !now.Before(c.retryAt)
		at = earliest(at, c.retryAt)
	}
	if !c.copyingSince.IsZero() {
		r := c.lastReport.Add(reportEvery)
		due.report, at = !now.Before(r), earliest(at, r)
		if c.progress > 0 {
			p := c.lastProgress.Add(c.progress)
			due.progress, at = !now.Before(p), earliest(at, p)
		}
	}
	if c.beat > 0 {
		at = earliest(at, c.lastTurn.Add(c.beat))
	}
	return due, at
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
