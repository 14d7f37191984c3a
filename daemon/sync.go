package daemon

import (
	"errors"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// passResult is what one pass over the transfer file read and decided
// under its lock.
type passResult struct {
	v        transfer.View
	dec      decision
	unwanted string // why the copy under way must stop, "" if it need not
	wrote    bool   // the update rewrote the file
	began    time.Time
	locked   time.Time // the lock was taken, zero if it never was
}

// sync reads the transfer file under its lock, decides the state, records
// what must be recorded, and then starts or stops the copy to match.
func (d *daemon) sync(first bool) {
	d.clock.lastPass = time.Now()
	if !d.cfg.Insecure {
		if err := checkControlDir(filepath.Dir(d.cfg.TransferFile), d.cfg.StrictModes); err != nil {
			d.fileError(err)
			return
		}
	}
	p, err := d.pass(first)
	if err != nil {
		d.passFailed(p, err)
		return
	}
	d.passRecorded(p)
	d.passApplied(p)
}

// pass runs one locked update of the transfer file: it reads the view,
// checks the copy under way against its entries, decides, and records
// the decision.
func (d *daemon) pass(first bool) (passResult, error) {
	p := passResult{began: time.Now()}
	_, wrote, err := d.store.UpdateContext(d.ctx, func(t *hashfile.Tree) error {
		p.locked = time.Now()
		// The loop looks at whatever version the file holds: the
		// notification of the write that answers it must not make the loop
		// read the file back. The Store runs one Read or Update at a time:
		// no update of the copy can find a change between this one's read
		// and here. A failure below sets fileErr, which ownChange heeds.
		d.store.Seen()
		p.v = d.readView(t)
		if d.job != nil {
			// Under the lock, where the worker records its commits: after
			// it, a commit made since would look like the library's change.
			p.unwanted = d.jobWanted(p.v, d.job)
		}
		s := coreState{state: d.state, first: first, copying: d.job != nil, flushStarted: d.flushStarted}
		p.dec = decide(p.v, s, p.locked)
		d.record(t, &p.v, p.dec)
		return nil
	})
	p.wrote = wrote
	return p, err
}

// record writes a pass's decision into the tree, under the lock: the
// removal of a leftover COMMAND EXIT, STATE, FLAG DONE, the FLUSH record,
// and the ERROR of each entry refused. v is the view the tree was read
// as; it is changed as the tree is.
func (d *daemon) record(t *hashfile.Tree, v *transfer.View, dec decision) {
	if dec.clearExit {
		t.Unset(transfer.KeyCommand)
		v.Command = ""
	}
	if dec.recordState {
		transfer.SetState(t, dec.next)
	}
	if dec.done {
		transfer.SetDone(t, true)
	}
	if !dec.flushBegan.IsZero() || !dec.flushEnded.IsZero() {
		_, written := v.Totals()
		if !dec.flushBegan.IsZero() {
			transfer.BeginFlush(t, dec.flushBegan, written)
		}
		if !dec.flushEnded.IsZero() {
			transfer.EndFlush(t, dec.flushEnded, written)
		}
	}
	for _, r := range dec.refuse {
		transfer.SetError(t, r.src, r.msg)
		d.log.Error("refused FILES entry", zap.String("src", r.src), zap.Error(r.problem))
	}
}

// passFailed handles a pass that could not read or rewrite the transfer
// file. Read whole, but no room to rewrite it (a full file system,
// RLIMIT_FSIZE): the copy still goes on as the file asks
// (decision.copyOnUnwritten). Nothing of this pass is taken as recorded:
// the next one writes the state and the flush record again.
func (d *daemon) passFailed(p passResult, err error) {
	if d.ctx.Err() != nil {
		return
	}
	d.fileError(err)
	if errors.As(err, new(*hashfile.WriteError)) && p.dec.copyOnUnwritten() {
		d.applyLimits(p.v)
		d.state = transfer.Running
		d.view = p.v
		d.schedule(p.v, p.dec.want, p.unwanted)
		d.report()
	}
}

// passRecorded takes note of a pass that succeeded: whether the transfer
// file is usable again.
func (d *daemon) passRecorded(p passResult) {
	d.log.Debug("transfer file read under its lock", zap.Duration("lock_wait", p.locked.Sub(p.began)),
		zap.Duration("held", time.Since(p.locked)), zap.Bool("wrote", p.wrote), zap.String("command", string(p.v.Command)),
		zap.Int("files", len(p.v.Files)))
	if p.wrote || d.wroteOK.Swap(false) || !d.fileWrite {
		d.fileUsable()
	} else {
		// Read, but a rewrite still has to succeed: try again later.
		d.fileRetry.at = time.Now().Add(d.fileRetry.wait)
	}
	if p.dec.clearExit {
		d.log.Warn("COMMAND EXIT left from an earlier run (STATE EXITING was recorded) removed; waiting for the next COMMAND",
			zap.String("transfer_file", d.cfg.TransferFile))
	}
}

// passApplied does what a recorded pass decided outside the lock: the
// limits, the state and the flush under way, the leftovers, the copy.
func (d *daemon) passApplied(p passResult) {
	v, dec := p.v, p.dec
	d.applyLimits(v)
	d.boundMemory()
	if dec.next != d.state {
		d.log.Info("state", zap.String("from", string(d.state)), zap.String("to", string(dec.next)),
			zap.String("command", string(v.Command)))
	}
	d.advance(v, dec)
	if v.Unknown != "" && !d.problems["COMMAND "+v.Unknown] {
		d.problems["COMMAND "+v.Unknown] = true
		d.log.Warn("unknown COMMAND ignored", zap.String("command", v.Unknown))
	}
	d.noteStale(d.view, v)
	d.view = v
	d.forgetRetries(v)
	if !d.swept {
		d.swept = true
		d.sweepAtStart(v)
	}
	d.removeStale()
	d.schedule(v, dec.want, p.unwanted)
	d.report()
	d.life.markReady()
}

// advance moves the daemon's state and flush under way on as the pass
// decided (coreState.advance), logging the end of a flush.
func (d *daemon) advance(v transfer.View, dec decision) {
	s := coreState{state: d.state, flushStarted: d.flushStarted}.advance(dec)
	if !dec.flushBegan.IsZero() {
		d.flushCopied = d.copied.Load()
	}
	if dec.done {
		d.flushComplete(v, dec.flushEnded)
	}
	d.state, d.flushStarted = s.state, s.flushStarted
}

// schedule starts a copy when running and idle, and cancels the copy under
// way when the state or its entry no longer calls for it (unwanted: why,
// found under the transfer file's lock); see nextCopy.
func (d *daemon) schedule(v transfer.View, want transfer.State, unwanted string) {
	switch nextCopy(d.state, want, d.job != nil, unwanted) {
	case copyStop:
		d.job.cancel()
	case copyAbandon:
		d.log.Warn("copy abandoned: "+unwanted, zap.String("src", d.job.file.Src),
			logging.Bytes("daemon_written", d.job.durable.Load()))
		d.job.cancel()
	case copyPick:
		if files := d.pickBatch(v, time.Now()); len(files) > 0 {
			d.startBatch(files)
		}
	}
}
