package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/internal/instance"
)

// instanceCheck is how often the instance lock is checked beyond inotify's
// notifications (see instance.Lock.Watch), for the changes inotify cannot
// see; rare, so that an idle daemon does not wake for it.
const instanceCheck = time.Minute

// watchInstance keeps the instance lock for the daemon's run: when its
// file is removed (a job script's "rm -rf $cntldir/*") it is taken again
// and the log says so; the returned channel receives the error when it
// cannot be, another daemon holding it now, and never closes.
func watchInstance(ctx context.Context, inst *instance.Lock, log *zap.Logger) <-chan error {
	out := make(chan error, 1)
	lost := inst.Watch(ctx, instanceCheck, func(path string) {
		log.Warn("the instance lock file was removed or replaced; took the lock again", zap.String("instance_lock", path))
	})
	go func() {
		if err, ok := <-lost; ok && err != nil {
			out <- err
		}
	}()
	return out
}

// lockLost stops the daemon when another process now holds its instance
// lock: it stops the copy under way at a consistent point (WRITTEN covers
// only durable bytes) and returns err without recording anything more in
// the transfer file, which the other daemon serves now.
func (d *daemon) lockLost(err error) error {
	d.log.Error("stopping: another process serves the transfer file now", zap.Error(err))
	d.stopJob()
	return err
}
