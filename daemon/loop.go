package daemon

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// loop is the daemon's run: its first pass over the transfer file, after
// which firstPass is closed, and then every wake-up until it ends. It
// waits on one timer, set for the next instant it must act (wakeClock),
// and on its events: a change of the transfer file, a copy's result, the
// instance lock lost, the end of ctx.
func (d *daemon) loop(ctx context.Context, firstPass chan<- struct{}) error {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	changed := filewatch.Watch(watchCtx, d.cfg.TransferFile, d.cfg.Poll, func(msg string, err error) {
		d.log.Warn(msg, zap.String("transfer_file", d.cfg.TransferFile), zap.Error(err))
	})
	d.logStart()
	d.state = transfer.Stopped
	d.sync(true)
	close(firstPass)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.beat.loopBeat()
		if d.state == transfer.Exiting && d.job == nil {
			d.log.Info("exiting on COMMAND EXIT")
			return nil
		}
		now := time.Now()
		due, at := d.nextWake(now)
		if due.any() {
			d.wake(due, now)
			continue
		}
		timer.Reset(at.Sub(now))
		select {
		case <-ctx.Done():
			return d.shutdown()
		case err := <-d.lost:
			return d.lockLost(err)
		case <-changed:
			if !d.ownChange() {
				d.sync(false)
			}
		case <-timer.C:
			// What is due is worked out at the next turn.
		case r := <-d.results:
			d.finish(r)
			d.sync(false)
		}
	}
}

// logStart logs the daemon's start, and the trust it places in a
// group-writable transfer file or control directory.
func (d *daemon) logStart() {
	d.log.Info("started", zap.String("transfer_file", d.cfg.TransferFile),
		zap.String("instance_lock", instance.LockPath(d.cfg.TransferFile)), zap.Int("pid", os.Getpid()),
		zap.String("locking", d.cfg.Locking.String()), zap.String("verify", d.cfg.Verify.String()))
	if g := groupWritable(d.cfg.TransferFile, filepath.Dir(d.cfg.TransferFile)); g != "" && !d.cfg.Insecure {
		d.log.Info("trusting a group-writable "+g+": its members can direct the daemon; --strict-modes refuses this",
			zap.String("umask_hint", "the SCR library creates its files from the umask (002 makes them group-writable)"))
	}
}

// nextWake brings the wake-up clock up to date with the loop's state at
// now (a turn, the retry due, a copy under way) and returns what is due
// and when the loop must next wake up.
func (d *daemon) nextWake(now time.Time) (wakeups, time.Time) {
	d.clock.lastTurn = now
	d.clock.retryAt = d.retryAt()
	d.clock.copying(d.job != nil, now)
	return d.clock.next(now)
}

// retryAt is when the loop must next try again: the transfer file itself
// while it is unusable, else, while running and idle, the earliest file
// out of its back-off or refusal to work out again; zero if none. A
// retry cannot be taken while a copy runs: its result wakes the loop.
func (d *daemon) retryAt() time.Time {
	if d.fileErr != "" {
		return d.fileRetry.at
	}
	if at, ok := d.nextRetry(); ok && d.job == nil && d.state == transfer.Running {
		return at
	}
	return time.Time{}
}

// wake does what is due at now.
func (d *daemon) wake(due wakeups, now time.Time) {
	if due.report {
		d.clock.lastReport = now
		d.report()
		d.logThrottle()
		d.logAuto()
	}
	if due.progress {
		d.clock.lastProgress = now
		d.logProgress()
	}
	if due.pass {
		d.sync(false)
	}
}
