package daemon

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// The daemon's stop timings, in one place.
//
// commitGrace and stopGrace are how long the commits of a copy still wait
// for the transfer file's lock once the copy is told to stop: what they
// record is durable already, the progress saved on stopping or a copy
// already published under its name, and the library holds the lock for a
// moment at each of its updates. Without them, a stop that met such a
// moment lost the commit: the next copy found no partial copy to resume (it
// had been published) and started again from 0. On a signal the wait is
// commitGrace, shorter than stopWait, so that the signal is still answered
// in time when the lock stays held; when the library stops the copy
// (STOP, a changed entry) it is stopGrace, since a loaded node's library
// was seen to hold the lock for up to a second at a time.
//
// stopWait and exitingWait bound a shutdown on a signal or Close, so that
// it is answered within a second whatever holds the daemon up: the copy
// gets stopWait to stop at a consistent point, and recording EXITING gets
// exitingWait for the lock.
const (
	commitGrace = 200 * time.Millisecond
	stopGrace   = 5 * time.Second
	stopWait    = 400 * time.Millisecond
	exitingWait = 300 * time.Millisecond
)

// graceContext returns a context that ends stopGrace after ctx does, or
// commitGrace after the daemon's run is cancelled by a signal, whichever
// comes first, and its cancel.
func (d *daemon) graceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopped := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancel) })
	signalled := context.AfterFunc(d.ctx, func() { time.AfterFunc(commitGrace, cancel) })
	return g, func() {
		stopped()
		signalled()
		cancel()
	}
}

// shutdown stops the copy under way at a consistent point (WRITTEN covers
// only durable bytes) and records EXITING. Neither step waits for long: a
// copy stuck in the kernel (a hung fsync) is left behind, its last commit
// standing, and if another process holds the transfer-file lock EXITING is
// not recorded; the log says so. WRITTEN only ever covers durable bytes,
// so nothing recorded is wrong either way: the next daemon resumes from it.
func (d *daemon) shutdown() error {
	if errors.Is(context.Cause(d.ctx), errClosed) {
		d.log.Info("stopping: closed by its caller")
	} else {
		d.log.Info("signal received: stopping")
	}
	d.stopJob()
	d.state = transfer.Exiting
	ctx, cancel := context.WithTimeout(context.Background(), exitingWait)
	defer cancel()
	if _, _, err := d.store.UpdateContext(ctx, func(t *hashfile.Tree) error {
		transfer.SetState(t, transfer.Exiting)
		// The copy's last commit came after the last pass read the file:
		// read it again so that the last status, metrics and log line
		// count what the file now holds.
		d.view = d.readView(t)
		return nil
	}); err != nil {
		d.log.Error("exiting without recording STATE EXITING", zap.Error(err))
	}
	size, written := d.view.Totals()
	d.log.Info("stopped", logging.Bytes("bytes_durable", written), logging.Bytes("bytes_pending", max(size-written, 0)))
	d.report()
	return nil
}

// stopJob stops the copy under way, if any, at a consistent point and
// handles its result, waiting at most stopWait: a copy stuck in the kernel
// (a hung fsync) is left behind, its last commit standing.
func (d *daemon) stopJob() {
	if d.job == nil {
		return
	}
	d.job.cancel()
	select {
	case r := <-d.results:
		d.finish(r)
	case <-time.After(stopWait):
		d.log.Warn("the copy did not stop in time; exiting without it (WRITTEN covers only durable bytes)",
			zap.String("src", d.job.file.Src), zap.Duration("waited", stopWait))
	}
}
