package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/internal/rate"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// errEntryChanged stops a copy whose FILES entry was removed or replaced.
var errEntryChanged = errors.New("the FILES entry was removed or changed by the library")

// daemon is the state of one run. Only the loop goroutine touches it,
// except the parts documented otherwise. It reads as a few parts: what it
// was given (settings, wiring), the copy machinery, the loop's view of
// the transfer file, the counters its workers share, the transfer file's
// trouble, the retries, the status snapshot, and the log's bookkeeping.
type daemon struct {
	cfg      Settings
	log      *zap.Logger
	onStatus func(Status) // Wiring.OnStatus, nil if none
	beat     *Heartbeat
	ctx      context.Context // the run's: cancelled by a signal or Close
	life     *lifecycle      // the handle's Ready, nil without a handle (handle.go)

	// The copy machinery.
	store      *hashfile.Store
	throttle   *flush.Throttle
	copier     *flush.Copier
	copiers    []*flush.Copier // one per stream of a batch; copiers[0] is copier
	bufs       cache.Buffers   // lent to the checks of --verify=before
	results    chan result
	batchFiles int // the most files a batch takes (batchFiles)
	streams    int // streams a batch may run, 0: as many as copiers (planDescriptors)
	groupFDs   int // descriptors a batch's group may hold, 0: unbounded (planDescriptors)

	loopState
	clock   wakeClock         // when the loop must next act (wake.go)
	limits  *limits           // BW and PERCENT last applied, nil before the first
	retries map[string]*retry // by source path
	rand    func() float64    // uniform in [0, 1): the jitter of retries

	workerShared
	fileTrouble
	statusShown
	logOnce
	hooks
}

// limits are the BW and PERCENT in force, logged when they change.
type limits struct{ bw, percent float64 }

// retry is the back-off of a file in error, or of the transfer file while
// it cannot be used, under retryPolicy (see next).
type retry struct {
	tries int           // back-offs taken since the last success: the policy's attempt count
	wait  time.Duration // the jittered wait drawn for the next attempt
	at    time.Time     // when the next attempt is due
	// failures counts the failed attempts; logged is the error last logged
	// (folded as transfer.ErrorValue), see logFailure.
	failures int
	logged   string
}

// job is a copy under way in the worker goroutine.
type job struct {
	file    transfer.File
	cancel  context.CancelFunc
	started time.Time
	from    int64
	durable atomic.Int64 // written by the worker's commits
	// subs are the jobs of a batch's files (a lone file is a batch of
	// one); file then sums their sizes and WRITTEN values, and durable
	// their durable values, for progress reports. parent is the batch's
	// job of a file's.
	subs   []*job
	parent *job
	batch  *flush.Batch  // the batch the file's copy completes into
	copier *flush.Copier // the copier of the batch's stream
	// grace is the context a batch's commits wait for the lock under
	// (see commitGrace), one for all its files.
	grace context.Context
	// quiet: a file of a batch logged as a whole; its own lines are debug.
	quiet bool
	// data is, once the copy returned, the bytes of data it transferred
	// (holes of a SIONlib container not counted): the rate's numerator.
	data int64
	// reuse: the file's copy was published before and only its record
	// failed (set by the loop); unrecorded: this copy was published and
	// its record failed (set by the worker). See unrecorded.go.
	reuse, unrecorded *unrecorded
}

// level is the level of the lines about j's file: info, debug for a file
// of a batch logged as a whole.
func (j *job) level() zapcore.Level {
	if j.quiet {
		return zapcore.DebugLevel
	}
	return zapcore.InfoLevel
}

type result struct {
	job      *job
	res      flush.Result
	err      error
	warnings string   // the checkpoint's warnings, "" if none or unchecked
	batch    []result // for a batch, one result per file taken up
}

// readView reads the transfer file's view, with the entries the daemon
// refuses marked with their Problem. What the daemon refuses depends on
// the entries' sources and destinations only (and the configuration), so
// while those stand as in the last view it is not worked out again: the
// daemon's own updates change WRITTEN, CRC, ERROR and the like, never
// them, and at 100,000 entries working it out costs maps of every path.
func (d *daemon) readView(t *hashfile.Tree) transfer.View {
	v := transfer.Read(t)
	if len(d.refused) != len(v.Files) || !sameEntries(d.view.Files, v.Files) || d.recheck.due(time.Now()) {
		d.refused = d.refusals(v.Files)
	}
	for i := range v.Files {
		if v.Files[i].Problem == nil {
			v.Files[i].Problem = d.refused[i]
		}
	}
	return v
}

// refusals returns, for each entry, why the daemon refuses it (confine,
// refuseConflicts), nil if it does not.
func (d *daemon) refusals(files []transfer.File) []error {
	out := make([]error, len(files))
	for i := range files {
		out[i] = d.confine(files[i])
	}
	k := keyer{}
	byFile := refuseConflicts(files, out, k, k.protect(d.cfg.TransferFile, d.cfg.Protect))
	d.recheck.after(time.Now(), byFile, d.cfg.RetryMin, d.cfg.RetryMax)
	return out
}

// sameEntries reports whether two views list the same entries, in the same
// order, with the same DESTINATION and SIZE.
func sameEntries(a, b []transfer.File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Src != b[i].Src || a[i].Dest != b[i].Dest || a[i].Size != b[i].Size {
			return false
		}
	}
	return true
}

// ownChange tells, on a notification that the transfer file changed,
// whether it holds nothing this loop has yet to see (hashfile's Changed:
// a commit of the copy may read a change of the library's and write it
// back with its own). The daemon's own updates then cost no read of a file
// of thousands of entries. The periodic re-read stays as it is.
func (d *daemon) ownChange() bool {
	return d.fileErr == "" && !d.store.Changed()
}

// leftoverExit tells whether the transfer file a daemon finds at its start
// holds a COMMAND EXIT that an earlier daemon already obeyed: it recorded
// STATE EXITING. A daemon started after that is meant to serve the file
// (exiting 0 at once would also keep systemd's Restart=on-failure from
// ever starting it again), so the leftover is removed and the daemon
// waits for the next COMMAND; a later EXIT is then obeyed as usual. An
// EXIT nobody answered yet (STATE not EXITING: its daemon died first, or
// it was written before this one started) is still obeyed.
func leftoverExit(v transfer.View) bool {
	return v.Command == transfer.Exit && v.State == transfer.Exiting
}

// flushComplete logs the end of a flush (FLAG DONE, recorded at ended)
// with its totals: the files and bytes the transfer file lists, what this
// process copied since the flush began, how long that took (as the FLUSH
// record says) and the average rate.
func (d *daemon) flushComplete(v transfer.View, ended time.Time) {
	size, _ := v.Totals()
	fields := []zap.Field{zap.Int("files", len(v.Files)), logging.Bytes("bytes", size)}
	if !d.flushStarted.IsZero() {
		elapsed := ended.Sub(d.flushStarted)
		copied := d.copied.Load() - d.flushCopied
		fields = append(fields, logging.Bytes("copied", copied), zap.Duration("elapsed", elapsed),
			logging.Rate("average_rate", rate.Average(copied, elapsed)))
	}
	d.log.Info("flush complete: FLAG DONE set", fields...)
	d.flushStarted = time.Time{}
}

// logProgress logs how far the copy under way has come.
func (d *daemon) logProgress() {
	if d.job == nil {
		return
	}
	f := d.job.file
	n := d.job.durable.Load()
	rate := d.jobRate()
	fields := []zap.Field{zap.String("src", f.Src), logging.Bytes("written", n), logging.Bytes("size", f.Size),
		zap.Float64("percent", float64(int64(1000*float64(n)/float64(max(f.Size, 1))))/10), logging.Rate("rate", rate)}
	if rate > 0 { // a meter is set
		if eta, ok := d.meter.ETA(time.Now(), f.Size-n, 0); ok {
			fields = append(fields, zap.Duration("eta", eta))
		}
	}
	d.log.Info("progress", fields...)
}

// logThrottle logs, at debug level, the pauses BW and PERCENT imposed since
// it last did.
func (d *daemon) logThrottle() {
	if !d.log.Core().Enabled(zap.DebugLevel) || d.limits == nil {
		return
	}
	ts := d.throttle.Stats()
	if ts.Sleeps == d.throttled {
		return
	}
	d.log.Debug("throttle paused the copy", zap.Uint64("pauses", ts.Sleeps-d.throttled),
		zap.Uint64("pauses_total", ts.Sleeps), zap.Duration("paused_total", ts.Slept),
		limitField("bw_limit", d.limits.bw, logging.Rate("bw_limit", d.limits.bw)),
		percentField("percent_limit", d.limits.percent))
	d.throttled = ts.Sleeps
}

// fileError logs a problem with the transfer file once, until it changes,
// and sets when to try again, on the back-off of files in error (jittered:
// a control file system full on every node at once must not have them all
// retry in lockstep). A rewrite that failed (a full file system,
// RLIMIT_FSIZE) left the old image intact; it is retried on the back-off.
func (d *daemon) fileError(err error) {
	var we *hashfile.WriteError
	write := errors.As(err, &we)
	if key := fileErrKey(err); key != d.fileErr {
		d.fileErr, d.fileWrite = key, write
		if write {
			d.log.Error("cannot rewrite the transfer file; its old image is intact, retrying", zap.Error(err))
		} else {
			d.log.Error("cannot use the transfer file; keeping the last good view", zap.Error(err), repairHint(err, d.cfg.TransferFile))
		}
	}
	d.fileRetry.next(retryPolicy(d.cfg), time.Now(), d.rand())
}

// repairHint is the log field that tells an operator the way out of a
// transfer file that does not decode, and a skipped field otherwise.
func repairHint(err error, path string) zap.Field {
	if !errors.Is(err, hashfile.ErrFormat) {
		return zap.Skip()
	}
	return zap.String("action", fmt.Sprintf("'scr-ctl repair --dry-run %s' says what can be kept; 'scr-ctl repair %s' keeps it and saves the corrupt file beside it", path, path))
}

// fileUsable ends a transfer-file problem.
func (d *daemon) fileUsable() {
	if d.fileErr != "" {
		d.log.Info("transfer file readable again")
		d.fileErr, d.fileWrite = "", false
	}
	d.fileRetry = retry{}
}

// fileErrKey is what makes two transfer-file problems the same one: the
// system error of a failed rewrite (the byte counts in its message change
// with every attempt), else the message.
func fileErrKey(err error) string {
	var we *hashfile.WriteError
	var errno unix.Errno
	if errors.As(err, &we) && errors.As(err, &errno) {
		return "rewrite: " + errno.Error()
	}
	return err.Error()
}

// applyLimits hands BW and PERCENT to the throttle, keeping the last good
// value of a malformed one.
func (d *daemon) applyLimits(v transfer.View) {
	next := limits{}
	if d.limits != nil {
		next = *d.limits
	}
	if !v.BWBad {
		d.throttle.SetBW(v.BW)
		next.bw = v.BW
	}
	if !v.PercentBad {
		d.throttle.SetPercent(v.Percent)
		next.percent = v.Percent
	}
	if d.limits == nil || next != *d.limits {
		msg := "limits changed"
		if d.limits == nil {
			msg = "limits"
		}
		d.log.Info(msg, limitField("bw", next.bw, logging.Rate("bw", next.bw)),
			percentField("percent", next.percent))
		d.limits = &next
	}
	d.topProblems = warnProblems(d.log, v.Problems, d.topProblems, next)
}

// limitField is a BW or PERCENT for the log: "unlimited" for 0.
func limitField(key string, v float64, f zap.Field) zap.Field {
	if v <= 0 {
		return zap.String(key, "unlimited")
	}
	return f
}

// confine checks a file's paths against --allow-src and --allow-dest.
func (d *daemon) confine(f transfer.File) error {
	switch {
	case !filepath.IsAbs(f.Src):
		return fmt.Errorf("source %q is not an absolute path", f.Src)
	case !filepath.IsAbs(f.Dest):
		return fmt.Errorf("destination %q is not an absolute path", f.Dest)
	}
	if _, ok := confinedRoot(f.Src, d.cfg.AllowSrc); !ok {
		return fmt.Errorf("source %s is outside the allowed source prefixes %v", f.Src, d.cfg.AllowSrc)
	}
	if _, ok := confinedRoot(f.Dest, d.cfg.AllowDest); !ok {
		return fmt.Errorf("destination %s is outside the allowed destination prefixes %v", f.Dest, d.cfg.AllowDest)
	}
	return nil
}

// jobWanted is stillWanted for every file of the job, each entry found
// through one index of the view: a batch of a thousand files is checked in
// one pass over the entries, not one per file.
func (d *daemon) jobWanted(v transfer.View, j *job) string {
	subs := j.subs
	entries := make(map[string]*transfer.File, len(subs))
	for _, sub := range subs {
		entries[sub.file.Src] = nil
	}
	for i := range v.Files {
		if _, ok := entries[v.Files[i].Src]; ok {
			entries[v.Files[i].Src] = &v.Files[i]
		}
	}
	for _, sub := range subs {
		if why := stillWanted(entries[sub.file.Src], sub); why != "" {
			return why
		}
	}
	return ""
}

// stillWanted returns why the copy under way must stop because of its
// FILES entry g (nil: there is none), "" if it need not. The entry must
// still name the same DESTINATION and SIZE, be acceptable, and hold the
// WRITTEN the copy last recorded: a WRITTEN the library set (a reset, a
// re-added entry) wins over the copy's progress, and the file is copied
// again from there.
func stillWanted(g *transfer.File, j *job) string {
	f := j.file
	switch {
	case g == nil:
		return "the library removed the FILES entry"
	case g.Dest != f.Dest || g.Size != f.Size:
		return "the library changed the FILES entry's DESTINATION or SIZE"
	case g.Problem != nil:
		return "the FILES entry is refused now"
	case g.Written != j.durable.Load():
		return fmt.Sprintf("the library set WRITTEN to %d (removed, re-added or reset the entry); its value wins", g.Written)
	}
	return ""
}

// copyFile runs in a stream of the worker's batch (see copyOne): the copy
// stage of one file, identifying the checkpoint, copying it and recording
// its progress as it becomes durable, until the copy is held by j.batch,
// which publishes it; its group's record completes it (recordGroups). It
// returns the checkpoint's warnings, recorded with the completion.
func (d *daemon) copyFile(ctx context.Context, j *job) (flush.Result, string, error) {
	f := j.file
	fj := flush.Job{Src: f.Src, Dst: f.Dest, Size: f.Size, Written: f.Written}
	fj.SrcRoot, _ = confinedRoot(f.Src, d.cfg.AllowSrc)
	fj.DstRoot, _ = confinedRoot(f.Dest, d.cfg.AllowDest)
	fj.Batch = j.batch
	var v *checkpointVerifier
	if d.cfg.Verify.before() {
		root := fj.SrcRoot
		if root == "" {
			root = "/"
		}
		pace := func(ctx context.Context) error {
			d.beat.workerBeat()
			return d.throttle.Pace(ctx)
		}
		v = &checkpointVerifier{path: f.Src, root: root, pace: pace, bufs: &d.bufs}
		fj.Verify = v
	}
	// A commit changes WRITTEN only while the entry holds what this copy
	// last recorded (or read at its start): if the library reset it or
	// re-added the entry, its value wins and the copy stops (see
	// recordProgress). Its completion is recorded with its group's.
	commit := func(n int64, crc uint32) error {
		began := time.Now()
		p := []progress{{job: j, n: n, crc: crc}}
		if err := d.recordProgress(j.grace, p); err != nil {
			return fmt.Errorf("recording WRITTEN %d: %w", n, err)
		}
		if p[0].refused {
			return errEntryChanged
		}
		d.log.Debug("committed WRITTEN", zap.String("src", f.Src), logging.Bytes("written", n),
			logging.Bytes("size", f.Size), zap.Duration("update", time.Since(began)))
		return nil
	}
	if res, ok := recordOnly(j); ok {
		return res, j.reuse.warnings, nil
	}
	res, err := j.copier.Copy(ctx, fj, commit)
	j.data = v.dataBetween(f.Written, f.Size)
	return res, v.warnings(), err
}

// finish handles the end of a copy in the loop goroutine.
func (d *daemon) finish(r result) {
	d.job = nil
	d.beat.workerStop()
	r.job.cancel()
	if r.batch != nil {
		d.finishBatch(r)
		return
	}
	f := r.job.file
	var we *hashfile.WriteError
	d.notePublished(r)
	if r.res.Restarted != "" {
		d.log.Warn("resume impossible; copied from the start", zap.String("src", f.Src), zap.String("reason", r.res.Restarted))
	}
	switch {
	case r.err == nil && r.res.Complete:
		d.flushed(r)
	case r.err == nil:
		// Stopped without an error: nothing to record.
	case errors.As(r.err, &we):
		// The transfer file has no room for the progress: the copy waits,
		// its partial copy kept, until the transfer file can be rewritten.
		// A failure from before a rewrite that succeeded (the copy's result
		// waited while the loop found the file writable again) is no news
		// of the file: reported, it would raise the problem once more
		// right after "readable again".
		if we.Rewrites == d.store.Rewrites() {
			d.fileError(r.err)
		}
		d.backoff(f)
	case errors.Is(r.err, context.Canceled):
		d.log.Info("copy stopped", zap.String("src", f.Src), logging.Bytes("written", r.job.durable.Load()))
	case errors.Is(r.err, errEntryChanged):
		d.log.Warn("copy abandoned: the library removed or changed the FILES entry (removed, re-added or WRITTEN reset); its values win",
			zap.String("src", f.Src), logging.Bytes("daemon_written", r.job.durable.Load()))
	case errors.Is(r.err, flush.ErrSourceReplaced):
		// Not an ERROR: the library may rewrite a source it asked to flush;
		// the new version is copied from 0 after the shortest back-off.
		d.log.Warn("source replaced or rewritten during the copy: copying it again from 0",
			zap.String("src", f.Src), zap.Error(r.err))
		d.retries[f.Src] = afresh(retryPolicy(d.cfg), time.Now(), d.rand())
	default:
		d.fail(f, r.err)
	}
}

// finishBatch handles the end of a batch: the end of each of its files,
// and a line for the batch when its files are logged as a whole.
func (d *daemon) finishBatch(r result) {
	var files int
	var bytes int64
	for _, sub := range r.batch {
		if sub.err == nil && sub.res.Complete {
			files++
			bytes += sub.job.data
		}
		d.finish(sub)
	}
	if len(r.batch) > 0 && r.batch[0].job.quiet && files > 0 {
		elapsed := time.Since(r.job.started)
		d.log.Info("flushed a batch of files", zap.Int("files", files), logging.Bytes("bytes", bytes),
			zap.String("first", r.batch[0].job.file.Src), zap.Duration("elapsed", elapsed),
			logging.Rate("average_rate", rate.Average(bytes, elapsed)))
	}
}

// flushed handles a file's copy that completed and was recorded: the end
// of its back-off, its WARNING, and its line.
func (d *daemon) flushed(r result) {
	f := r.job.file
	d.logRecovered(f, d.retries[f.Src])
	delete(d.retries, f.Src)
	if r.warnings != d.warned[f.Src] {
		if r.warnings != "" {
			d.log.Warn("checkpoint flushed with a warning", zap.String("src", f.Src), zap.String("warning", r.warnings))
		}
		d.warned[f.Src] = r.warnings
	}
	d.lastOK = time.Now()
	// Checked first: a batch's files are logged at debug, and their
	// fields, built for nothing, took milliseconds between a batch's
	// last record and FLAG DONE.
	if ce := d.log.Check(r.job.level(), "flushed"); ce != nil {
		elapsed := d.lastOK.Sub(r.job.started)
		// copied: this attempt's data bytes, which elapsed and the
		// rate are about (a resumed file's size is not, nor holes).
		ce.Write(zap.String("src", f.Src), zap.String("dest", f.Dest), logging.Bytes("size", f.Size),
			logging.Bytes("copied", r.job.data),
			zap.String("crc", hashfile.FormatCRC(r.res.CRC)), zap.Duration("elapsed", elapsed),
			logging.Rate("average_rate", rate.Average(r.job.data, elapsed)))
	}
}

// fail records a file's error in the log and the transfer file and puts
// the file on back-off.
func (d *daemon) fail(f transfer.File, err error) {
	msg := err.Error()
	present := true
	if _, _, uerr := d.store.UpdateContext(d.ctx, func(t *hashfile.Tree) error {
		present = transfer.SetError(t, f.Src, msg)
		return nil
	}); uerr != nil {
		d.log.Error("cannot record ERROR in the transfer file", zap.String("src", f.Src), zap.Error(uerr))
	}
	if !present {
		// The library removed the entry while the copy ran: nothing to
		// retry (forgetRetries told how earlier attempts ended).
		d.log.Debug("copy failed after the library removed its FILES entry", zap.String("src", f.Src), zap.Error(err))
		return
	}
	d.logFailure(f, err, d.backoff(f))
}

// backoff puts a file on back-off before its next attempt.
func (d *daemon) backoff(f transfer.File) *retry {
	r := d.retries[f.Src]
	if r == nil {
		r = &retry{}
		d.retries[f.Src] = r
	}
	r.next(retryPolicy(d.cfg), time.Now(), d.rand())
	return r
}

func (d *daemon) nextRetry() (time.Time, bool) {
	var at time.Time
	found := false
	for _, f := range d.view.Files {
		r := d.retries[f.Src]
		if r == nil || !f.Pending() || f.Problem != nil {
			continue
		}
		if !found || r.at.Before(at) {
			at, found = r.at, true
		}
	}
	if !d.recheck.at.IsZero() && (!found || d.recheck.at.Before(at)) {
		at, found = d.recheck.at, true
	}
	return at, found
}

// forgetRetries drops the back-off and the warning logged of files no
// longer in the transfer file.
func (d *daemon) forgetRetries(v transfer.View) {
	if len(d.retries) == 0 && len(d.warned) == 0 {
		return
	}
	present := make(map[string]bool, len(v.Files))
	for _, f := range v.Files {
		present[f.Src] = true
	}
	for src, r := range d.retries {
		if !present[src] {
			d.logGaveUp(src, r)
			delete(d.retries, src)
		}
	}
	for src := range d.warned {
		if !present[src] {
			delete(d.warned, src)
		}
	}
}

// report keeps the status snapshot for the handle's Status and sends it
// to OnStatus if anything changed.
func (d *daemon) report() {
	s := Status{State: d.state, LastSuccess: d.lastOK, BytesCopied: d.copied.Load(), LockWaitSince: d.lockWaitSince(), NoQuietSince: d.noQuietSince()}
	size, written := d.view.Totals()
	if d.job != nil {
		s.File = d.job.file.Src
		n := d.job.durable.Load()
		written += n - min(d.job.file.Written, d.job.file.Size)
		// The rate is the one scr-ctl status shows too: a moving average
		// over the commits, from the bytes made durable.
		now := time.Now()
		if d.meter == nil {
			d.meter = rate.New(0)
		}
		d.meter.Observe(now, s.BytesCopied)
		s.Rate, _ = d.meter.Rate(now)
	} else {
		d.meter = nil // an idle spell is not part of the next copy's rate
	}
	s.BytesWritten, s.BytesPending = written, max(size-written, 0)
	for _, f := range d.view.Files {
		if st := f.State(); st == transfer.StateError || st == transfer.StateInvalid {
			s.FilesInError++
		}
		if f.Warning != "" {
			s.FilesWarned++
		}
	}
	ts := d.throttle.Stats()
	s.ThrottleSleeps, s.ThrottleSlept = ts.Sleeps, ts.Slept
	s.BWAuto = d.throttle.AutoRate()
	if d.limits != nil {
		s.BWLimit, s.PercentLimit = d.limits.bw, d.limits.percent
	}
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	if s != d.lastShown {
		d.lastShown = s
		if d.onStatus != nil {
			d.onStatus(s)
		}
	}
}

// lockWait is the transfer file's lock-wait hook: called from whichever
// goroutine waits, it reports the wait (or its end) at once, on top of the
// last snapshot, since a waiting loop cannot report.
func (d *daemon) lockWait(since time.Time) {
	if since.IsZero() {
		d.lockSince.Store(0)
	} else {
		d.lockSince.Store(since.UnixNano())
		d.log.Warn("waiting for the transfer-file lock, held by another process", zap.Time("since", since))
	}
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	s := d.lastShown
	s.LockWaitSince = d.lockWaitSince()
	if s != d.lastShown {
		d.lastShown = s
		if d.onStatus != nil {
			d.onStatus(s)
		}
	}
}

// settleWait is the transfer file's settling hook (fcntl locking): called
// from whichever goroutine accessed the file, when an access went ahead
// although the library left the file no quiet moment for the settling
// bound (since: when that wait began), and with the zero time when an
// access finds quiet again. The STATUS= line says so meanwhile.
func (d *daemon) settleWait(since time.Time) {
	if since.IsZero() {
		d.quietSince.Store(0)
		d.log.Info("the library leaves the transfer file quiet moments again")
	} else {
		d.quietSince.Store(since.UnixNano())
		d.log.Warn("the library left the transfer file no quiet moment: accessing it anyway (SCR <= 1.2 with fcntl locking may fail its lock now)",
			zap.Time("since", since), zap.Duration("waited", time.Since(since)))
	}
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	if d.lastShown.State == "" {
		return // the first snapshot, READY=1, waits for the first STATE recorded; it carries this
	}
	s := d.lastShown
	s.NoQuietSince = d.noQuietSince()
	if s != d.lastShown {
		d.lastShown = s
		if d.onStatus != nil {
			d.onStatus(s)
		}
	}
}

// noQuietSince is since when the library has left the transfer file no
// quiet moment, or the zero time.
func (d *daemon) noQuietSince() time.Time {
	if ns := d.quietSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// lockWaitSince is since when an access waits for the transfer-file lock,
// or the zero time.
func (d *daemon) lockWaitSince() time.Time {
	if ns := d.lockSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// jobRate is the rate at which the copy under way makes bytes durable:
// the moving average status and metrics show; 0 when idle or not known yet.
func (d *daemon) jobRate() float64 {
	if d.job == nil || d.meter == nil {
		return 0
	}
	r, _ := d.meter.Rate(time.Now())
	return r
}
