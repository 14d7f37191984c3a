package daemon

import (
	"context"
	"errors"
	"sync"
)

// errClosed is the cause of a daemon's stop asked by Daemon.Close.
var errClosed = errors.New("closed by its caller")

// Daemon is a running daemon's handle, returned by Start: it tells when
// the daemon is ready and when it has ended, what it is doing, and stops
// it.
type Daemon struct {
	d      *daemon
	ctx    context.Context // the run's: ends on the caller's ctx or Close
	cancel context.CancelCauseFunc
	life   *lifecycle
}

// lifecycle is what the loop tells the handle: ready once the first STATE
// is recorded, done with the run's error once the loop has ended.
type lifecycle struct {
	readyOnce sync.Once
	ready     chan struct{}
	done      chan struct{}
	err       error // set before done is closed
}

func newHandle(ctx context.Context, d *daemon) *Daemon {
	rctx, cancel := context.WithCancelCause(ctx)
	return &Daemon{d: d, ctx: rctx, cancel: cancel, life: &lifecycle{ready: make(chan struct{}), done: make(chan struct{})}}
}

// markReady closes ready, once.
func (l *lifecycle) markReady() {
	if l != nil {
		l.readyOnce.Do(func() { close(l.ready) })
	}
}

// end records the loop's error and closes done.
func (h *Daemon) end(err error) {
	h.life.err = err
	h.cancel(nil)
	close(h.life.done)
}

// Ready is closed once the daemon has recorded its first STATE in the
// transfer file: the library's commands are obeyed from then on. It is
// never closed if the daemon ends before.
func (h *Daemon) Ready() <-chan struct{} { return h.life.ready }

// Done is closed once the daemon has ended: on COMMAND EXIT, on Close or
// its context's end (EXITING recorded), or on losing its instance lock.
func (h *Daemon) Done() <-chan struct{} { return h.life.done }

// Err is, once Done is closed, why the daemon ended: nil for COMMAND EXIT,
// Close or the end of its context, the error for an instance lock another
// process took. Before Done is closed it is nil.
func (h *Daemon) Err() error {
	select {
	case <-h.life.done:
		return h.life.err
	default:
		return nil
	}
}

// Status is the daemon's latest snapshot: what it last reported to
// Config.OnStatus (the zero Status before its first pass).
func (h *Daemon) Status() Status {
	h.d.statusMu.Lock()
	defer h.d.statusMu.Unlock()
	return h.d.lastShown
}

// Close stops the daemon as SIGTERM does: the copy under way stops at a
// consistent point, STATE EXITING is recorded, and Close returns once the
// daemon has ended, with Err.
func (h *Daemon) Close() error {
	h.cancel(errClosed)
	<-h.life.done
	return h.life.err
}
