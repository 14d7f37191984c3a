package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/internal/rate"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// errEntryChanged stops a copy whose FILES entry was removed or replaced.
var errEntryChanged = errors.New("the FILES entry was removed or changed by the library")

// daemon is the state of one run. Only the loop goroutine touches it,
// except the fields documented otherwise.
type daemon struct {
	cfg      Config
	log      *zap.Logger
	store    *hashfile.Store
	throttle *flush.Throttle
	copier   *flush.Copier
	copiers  []*flush.Copier // one per stream of a batch; copiers[0] is copier
	bufs     cache.Buffers   // lent to the checks of --verify=before

	ctx        context.Context // the run's: cancelled by a signal
	state      transfer.State  // as recorded in the file
	view       transfer.View   // last good view of the file
	fileErr    string          // last problem with the transfer file (fileErrKey), logged once
	fileWrite  bool            // fileErr is a failed rewrite: cleared only by a write that succeeds
	fileRetry  retry           // when to try the transfer file again while fileErr is set
	wroteOK    atomic.Bool     // a commit rewrote the transfer file (worker, read by the loop)
	lockSince  atomic.Int64    // unix ns since when an access waits for the transfer-file lock; 0 if none
	quietSince atomic.Int64    // unix ns since when the library leaves the file no quiet moment (settleWait); 0 if it does
	statusMu   sync.Mutex      // guards lastShown: the lock-wait hook reports from either goroutine
	problems   map[string]bool
	stale      map[string]bool        // partial copies to remove (litter.go)
	published  map[string]*unrecorded // by source path: published, not recorded (unrecorded.go)
	swept      bool                   // leftover partial copies looked for at start
	warned     map[string]string      // WARNING last logged, by source path
	retries    map[string]*retry      // by source path
	job        *job                   // copy under way, nil when idle
	beat       *Heartbeat
	results    chan result
	lastOK     time.Time
	lastShown  Status
	copied     atomic.Int64 // bytes made durable by this process, for metrics
	meter      *rate.Meter  // the rate of copied while copying; nil while idle

	rand         func() float64        // uniform in [0, 1): the jitter of retries
	limits       *limits               // BW and PERCENT last applied, nil before the first
	throttled    uint64                // throttle pauses already logged
	batchFiles   int                   // the most files a batch takes (batchFiles)
	streams      int                   // streams a batch may run, 0: as many as copiers (planDescriptors)
	groupFDs     int                   // descriptors a batch's group may hold, 0: unbounded (planDescriptors)
	refused      []error               // why each entry of view is refused (readView), nil where it is not
	memSize      int                   // transfer file size the memory limit was set for (memory.go)
	onGroup      func(groupEvent, int) // tests: told each step of a batch's groups (batch.go)
	flushStarted time.Time             // the flush under way began, zero when none
	flushCopied  int64                 // copied when it began
	lost         <-chan error          // the instance lock lost to another process (instance.go)
	recheck      recheck               // when refusals found by comparing files are worked out again (entries.go)
	autoLogged   float64               // BW auto's rate last logged (bwauto.go)

	// topProblems are the top-level problems of the last pass (BW,
	// PERCENT, COMMAND values): each is logged when it appears.
	topProblems map[string]bool
}

// limits are the BW and PERCENT in force, logged when they change.
type limits struct{ bw, percent float64 }

type retry struct {
	delay time.Duration // back-off ceiling, doubling with each failure
	wait  time.Duration // the jittered wait drawn under it
	at    time.Time
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
	// subs, for a batch of small files, are the jobs of its files; file
	// then sums their sizes and WRITTEN values, for progress reports.
	subs   []*job
	batch  *flush.Batch  // the batch a file's copy completes into, nil if none
	copier *flush.Copier // the copier of a batch's stream, nil for d.copier
	// grace is the context a batch's commits wait for the lock under
	// (see commitGrace), one for all its files; nil: copyFile makes one.
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

// Run runs the daemon until COMMAND EXIT (it returns nil)
// or ctx is cancelled (a signal: it stops the copy at a consistent point,
// records EXITING and returns nil). It returns an error only if it cannot
// start.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	path, err := filepath.Abs(cfg.TransferFile)
	if err != nil {
		return fmt.Errorf("transfer file %q: %w", cfg.TransferFile, err)
	}
	cfg.TransferFile = path
	cfg.Flush.VerifyAfter = cfg.Verify.after()
	cfg.Flush.Owner = partialOwner(path)
	if err := controlDir(filepath.Dir(path), cfg.CreateDir); err != nil {
		return err
	}
	for _, p := range append(append([]string{}, cfg.AllowSrc...), cfg.AllowDest...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("allowed prefix %q is not an absolute path", p)
		}
	}
	store := hashfile.NewStore(path, cfg.Locking)
	if !cfg.Insecure {
		if err := checkControlDir(filepath.Dir(path), cfg.StrictModes); err != nil {
			return err
		}
	}
	// One daemon per transfer file, before anything is written: a second
	// daemon would resume the same partial copies and fight over STATE.
	// The kernel releases the lock however this process ends.
	inst, err := instance.Acquire(path)
	if err != nil {
		return err
	}
	defer inst.Close()
	if err := createTransferFile(path, cfg.StrictModes); err != nil {
		return err
	}
	store.CreateMode(createMode(cfg.StrictModes))
	if !cfg.Insecure {
		store.Guard(transferFileGuard(cfg.StrictModes))
		var r *refusal
		if _, err := store.ReadContext(ctx); errors.As(err, &r) || errors.Is(err, hashfile.ErrSymlink) {
			return err
		}
	}
	th := flush.NewThrottle()
	th.SetAuto(cfg.BWAuto)
	d := &daemon{
		ctx:       ctx,
		beat:      cfg.Heartbeat,
		cfg:       cfg,
		log:       cfg.Log,
		store:     store,
		throttle:  th,
		copier:    flush.NewCopier(th, cfg.Flush),
		problems:  map[string]bool{},
		stale:     map[string]bool{},
		published: map[string]*unrecorded{},
		warned:    map[string]string{},
		retries:   map[string]*retry{},
		rand:      rand.Float64,
		results:   make(chan result, 1),
	}
	d.lost = watchInstance(ctx, inst, d.log)
	d.batchFiles = batchFiles()
	d.copiers = []*flush.Copier{d.copier}
	for len(d.copiers) < cfg.Streams {
		d.copiers = append(d.copiers, flush.NewCopier(th, cfg.Flush))
	}
	d.planDescriptors()
	if d.beat == nil {
		d.beat = NewHeartbeat(0)
	}
	d.beat.setWorkerGrace(2 * max(cfg.Flush.SyncInterval, flush.DefaultSyncInterval))
	store.OnLockWait(d.lockWait)
	if cfg.Locking == hashfile.Fcntl {
		store.Settle(cfg.FcntlSettle)
		store.OnSettleWait(d.settleWait)
	}
	return d.loop(ctx)
}

func (d *daemon) loop(ctx context.Context) error {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	changed := filewatch.Watch(watchCtx, d.cfg.TransferFile, d.cfg.Poll, func(msg string, err error) {
		d.log.Warn(msg, zap.String("transfer_file", d.cfg.TransferFile), zap.Error(err))
	})
	reread := time.NewTicker(d.cfg.Reread)
	defer reread.Stop()
	retryTimer := time.NewTimer(time.Hour)
	retryTimer.Stop()
	var progress <-chan time.Time
	var progressTicker *time.Ticker
	var heartbeat <-chan time.Time
	if d.beat.every > 0 {
		t := time.NewTicker(d.beat.every)
		defer t.Stop()
		heartbeat = t.C
	}
	var progressLog <-chan time.Time // a progress line for the log
	var progressLogTicker *time.Ticker

	d.log.Info("started", zap.String("transfer_file", d.cfg.TransferFile),
		zap.String("instance_lock", instance.LockPath(d.cfg.TransferFile)), zap.Int("pid", os.Getpid()),
		zap.String("locking", d.cfg.Locking.String()), zap.String("verify", d.cfg.Verify.String()))
	if g := groupWritable(d.cfg.TransferFile, filepath.Dir(d.cfg.TransferFile)); g != "" && !d.cfg.Insecure {
		d.log.Info("trusting a group-writable "+g+": its members can direct the daemon; --strict-modes refuses this",
			zap.String("umask_hint", "the SCR library creates its files from the umask (002 makes them group-writable)"))
	}
	d.state = transfer.Stopped
	d.sync(true)
	for {
		d.beat.loopBeat()
		if d.state == transfer.Exiting && d.job == nil {
			d.log.Info("exiting on COMMAND EXIT")
			return nil
		}
		// Arm the retry timer for the earliest file waiting out its back-off.
		// Not while the transfer file is unusable: the retry could not be
		// taken, and a timer already due would fire again at once.
		// While the transfer file is unusable, retry it on its own back-off.
		if d.fileErr != "" {
			retryTimer.Reset(time.Until(d.fileRetry.at))
		} else if at, ok := d.nextRetry(); ok && d.job == nil && d.state == transfer.Running {
			retryTimer.Reset(time.Until(at))
		}
		// Report progress once a second while copying, never while idle.
		if d.job != nil && progressTicker == nil {
			progressTicker = time.NewTicker(time.Second)
			progress = progressTicker.C
		} else if d.job == nil && progressTicker != nil {
			progressTicker.Stop()
			progressTicker, progress = nil, nil
		}
		// A progress line every ProgressEvery while copying.
		if d.job != nil && progressLogTicker == nil && d.cfg.ProgressEvery > 0 {
			progressLogTicker = time.NewTicker(d.cfg.ProgressEvery)
			progressLog = progressLogTicker.C
		} else if d.job == nil && progressLogTicker != nil {
			progressLogTicker.Stop()
			progressLogTicker, progressLog = nil, nil
		}
		select {
		case <-ctx.Done():
			return d.shutdown()
		case err := <-d.lost:
			return d.lockLost(err)
		case <-changed:
			if d.ownChange() {
				continue
			}
			d.sync(false)
		case <-reread.C:
			d.sync(false)
		case <-retryTimer.C:
			d.sync(false)
		case <-progress:
			d.report()
			d.logThrottle()
			d.logAuto()
		case <-progressLog:
			d.logProgress()
		case <-heartbeat:
		case r := <-d.results:
			d.finish(r)
			d.sync(false)
		}
	}
}

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
const (
	commitGrace = 200 * time.Millisecond
	stopGrace   = 5 * time.Second
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

// Bounds of a shutdown on a signal, so that it is answered within a
// second whatever holds the daemon up: the copy gets stopWait to stop at a
// consistent point, and recording EXITING gets exitingWait for the lock.
const (
	stopWait    = 400 * time.Millisecond
	exitingWait = 300 * time.Millisecond
)

// shutdown stops the copy under way at a consistent point (WRITTEN covers
// only durable bytes) and records EXITING. Neither step waits for long: a
// copy stuck in the kernel (a hung fsync) is left behind, its last commit
// standing, and if another process holds the transfer-file lock EXITING is
// not recorded; the log says so. WRITTEN only ever covers durable bytes,
// so nothing recorded is wrong either way: the next daemon resumes from it.
func (d *daemon) shutdown() error {
	d.log.Info("signal received: stopping")
	if d.job != nil {
		d.job.cancel()
		select {
		case r := <-d.results:
			d.finish(r)
		case <-time.After(stopWait):
			d.log.Warn("the copy did not stop in time; exiting without it (WRITTEN covers only durable bytes)",
				zap.String("src", d.job.file.Src), zap.Duration("waited", stopWait))
		}
	}
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

// sync reads the transfer file under its lock, decides the state, records
// what must be recorded, and then starts or stops the copy to match.
func (d *daemon) sync(first bool) {
	if !d.cfg.Insecure {
		if err := checkControlDir(filepath.Dir(d.cfg.TransferFile), d.cfg.StrictModes); err != nil {
			d.fileError(err)
			return
		}
	}
	var v transfer.View
	var want, next transfer.State
	var done, staleExit bool
	var unwanted string // why the copy under way must stop, "" if it need not
	began := time.Now()
	var flushBegan, flushEnded time.Time // the flush recorded as begun, ended
	var locked time.Time
	_, wrote, err := d.store.UpdateContext(d.ctx, func(t *hashfile.Tree) error {
		locked = time.Now()
		// The loop looks at whatever version the file holds: the
		// notification of the write that answers it must not make the loop
		// read the file back. The Store runs one Read or Update at a time:
		// no update of the copy can find a change between this one's read
		// and here. A failure below sets fileErr, which ownChange heeds.
		d.store.Seen()
		v = d.readView(t)
		if first && leftoverExit(v) {
			t.Unset(transfer.KeyCommand)
			v.Command, staleExit = "", true
		}
		if d.job != nil {
			// Under the lock, where the worker records its commits: after
			// it, a commit made since would look like the library's change.
			unwanted = d.jobWanted(v, d.job)
		}
		want, done = transfer.Next(v, d.state, d.job != nil)
		next = want
		if d.job != nil && want != transfer.Running {
			// Stop the copy first; the new state is recorded once it has.
			next = d.state
		}
		if v.State != next || first {
			transfer.SetState(t, next)
		}
		if done {
			transfer.SetDone(t, true)
		}
		// The flush record (FLUSH) is written with the state it times.
		flushBegan, flushEnded = time.Time{}, time.Time{}
		if next == transfer.Running && d.flushStarted.IsZero() {
			flushBegan = time.Now()
			_, written := v.Totals()
			transfer.BeginFlush(t, flushBegan, written)
		}
		if done {
			flushEnded = time.Now()
			_, written := v.Totals()
			transfer.EndFlush(t, flushEnded, written)
		}
		d.recordProblems(t, v)
		return nil
	})
	if err != nil {
		if d.ctx.Err() != nil {
			return
		}
		d.fileError(err)
		if errors.As(err, new(*hashfile.WriteError)) && want == transfer.Running && !done && !first {
			// Read whole, but no room to rewrite it (a full file system,
			// RLIMIT_FSIZE): the copy still goes on as the file asks; its
			// commits wait, their partial copies kept, until the file can
			// be rewritten. Nothing of this pass is taken as recorded: the
			// next one writes the state and the flush record again.
			d.applyLimits(v)
			d.state = transfer.Running
			d.view = v
			d.schedule(v, want, unwanted)
			d.report()
		}
		return
	}
	d.log.Debug("transfer file read under its lock", zap.Duration("lock_wait", locked.Sub(began)),
		zap.Duration("held", time.Since(locked)), zap.Bool("wrote", wrote), zap.String("command", string(v.Command)),
		zap.Int("files", len(v.Files)))
	if wrote || d.wroteOK.Swap(false) || !d.fileWrite {
		d.fileUsable()
	} else {
		// Read, but a rewrite still has to succeed: try again later.
		d.fileRetry.at = time.Now().Add(d.fileRetry.delay)
	}
	if staleExit {
		d.log.Warn("COMMAND EXIT left from an earlier run (STATE EXITING was recorded) removed; waiting for the next COMMAND",
			zap.String("transfer_file", d.cfg.TransferFile))
	}
	d.applyLimits(v)
	d.boundMemory()
	if next != d.state {
		d.log.Info("state", zap.String("from", string(d.state)), zap.String("to", string(next)),
			zap.String("command", string(v.Command)))
	}
	if !flushBegan.IsZero() {
		d.flushStarted, d.flushCopied = flushBegan, d.copied.Load()
	}
	if done {
		d.flushComplete(v, flushEnded)
	} else if next != transfer.Running {
		d.flushStarted = time.Time{} // STOP or EXIT: a later RUN starts the count again
	}
	if v.Unknown != "" && !d.problems["COMMAND "+v.Unknown] {
		d.problems["COMMAND "+v.Unknown] = true
		d.log.Warn("unknown COMMAND ignored", zap.String("command", v.Unknown))
	}
	d.state = next
	d.noteStale(d.view, v)
	d.view = v
	d.forgetRetries(v)
	if !d.swept {
		d.swept = true
		d.sweepAtStart(v)
	}
	d.removeStale()
	d.schedule(v, want, unwanted)
	d.report()
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
// and sets when to try again. A rewrite that failed (a full file system,
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
	r := &d.fileRetry
	r.delay = min(max(r.delay*2, d.cfg.RetryMin), d.cfg.RetryMax)
	r.at = time.Now().Add(r.delay)
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

// recordProblems writes an ERROR for entries that cannot be copied as they
// stand, so the library and the administrator see why the flush is not done.
func (d *daemon) recordProblems(t *hashfile.Tree, v transfer.View) {
	for _, f := range v.Files {
		if f.Problem == nil {
			continue
		}
		msg := transfer.Refused(f.Problem)
		// The recorded ERROR is the folded form: compare with that, or a
		// message with a double space, a tab or a line break would differ
		// from it on every pass, and be logged and written again each time.
		if f.Error != transfer.ErrorValue(msg) {
			transfer.SetError(t, f.Src, msg)
			d.log.Error("refused FILES entry", zap.String("src", f.Src), zap.Error(f.Problem))
		}
	}
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

// schedule starts a copy when running and idle, and cancels the copy under
// way when the state or its entry no longer calls for it (unwanted: why,
// found under the transfer file's lock).
func (d *daemon) schedule(v transfer.View, want transfer.State, unwanted string) {
	if d.job != nil {
		if want != transfer.Running {
			d.job.cancel()
		} else if why := unwanted; why != "" {
			d.log.Warn("copy abandoned: "+why, zap.String("src", d.job.file.Src),
				logging.Bytes("daemon_written", d.job.durable.Load()))
			d.job.cancel()
		}
		return
	}
	if d.state != transfer.Running {
		return
	}
	switch files := d.pickBatch(v, time.Now()); len(files) {
	case 0:
	case 1:
		d.start(files[0])
	default:
		d.startBatch(files)
	}
}

// jobWanted is stillWanted for every file of the job, each entry found
// through one index of the view: a batch of a thousand files is checked in
// one pass over the entries, not one per file.
func (d *daemon) jobWanted(v transfer.View, j *job) string {
	subs := j.subs
	if subs == nil {
		subs = []*job{j}
	}
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

func (d *daemon) start(f transfer.File) {
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{file: f, cancel: cancel, started: time.Now(), from: f.Written, reuse: d.published[f.Src]}
	j.durable.Store(f.Written)
	d.job = j
	d.beat.workerStart()
	d.logAttempt(f, d.retries[f.Src])
	go func() {
		r := result{job: j}
		r.res, r.warnings, r.err = d.copyFile(ctx, j)
		d.results <- r
	}()
}

// copyFile runs in the worker goroutine: identify the checkpoint, copy it,
// and record its progress. It returns the checkpoint's warnings, recorded
// with the completion.
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
	// The final commit records WRITTEN = SIZE, the CRC and the end of any
	// ERROR in one update, so that no crash can leave a complete file
	// without its CRC. A commit changes WRITTEN only while the entry holds
	// what this copy last recorded (or read at its start): if the library
	// reset it or re-added the entry, its value wins and the copy stops.
	cctx := j.grace
	if cctx == nil {
		var cancel context.CancelFunc
		cctx, cancel = d.graceContext(ctx)
		defer cancel()
	}
	commit := func(n int64, crc uint32) error {
		ok, stored := true, false
		var prev int64
		began := time.Now()
		_, wrote, err := d.store.UpdateContext(cctx, func(t *hashfile.Tree) error {
			prev = j.durable.Load()
			if n == f.Size {
				ok = transfer.SetComplete(t, f, prev, crc, j.warnings(v))
			} else {
				ok = transfer.SetWrittenFrom(t, f, prev, n)
			}
			if ok {
				// Under the file's lock, so that the loop, comparing the
				// entry with durable under the same lock, never takes this
				// commit for a change made by the library.
				j.durable.Store(n)
				stored = true
			}
			return nil
		})
		if err != nil {
			if stored {
				// Not recorded after all (the image could not be written).
				j.durable.Store(prev)
			}
			return fmt.Errorf("recording WRITTEN %d: %w", n, err)
		}
		d.beat.workerBeat()
		if wrote {
			d.wroteOK.Store(true)
		}
		if !ok {
			return errEntryChanged
		}
		d.log.Debug("committed WRITTEN", zap.String("src", f.Src), logging.Bytes("written", n),
			logging.Bytes("size", f.Size), zap.Duration("update", time.Since(began)))
		if n > prev {
			d.copied.Add(n - prev)
		}
		return nil
	}
	if res, ok, err := recordOnly(j, commit); ok {
		return res, j.reuse.warnings, err
	}
	c := d.copier
	if j.copier != nil {
		c = j.copier
	}
	res, err := c.Copy(ctx, fj, commit)
	j.data = v.dataBetween(f.Written, f.Size)
	if res.Complete && err != nil {
		j.unrecorded = noteUnrecorded(f, res.CRC, v.warnings())
	}
	return res, v.warnings(), err
}

// finish handles the end of a copy in the loop goroutine.
func (d *daemon) finish(r result) {
	d.job = nil
	d.beat.workerStop()
	r.job.cancel()
	if r.batch != nil {
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
		d.retries[f.Src] = &retry{delay: 0, at: time.Now().Add(d.cfg.RetryMin)}
	default:
		d.fail(f, r.err)
	}
}

// fail records a file's error in the log and the transfer file and puts
// the file on back-off.
func (d *daemon) fail(f transfer.File, err error) {
	r := d.backoff(f)
	msg := err.Error()
	d.logFailure(f, err, r)
	if _, _, uerr := d.store.UpdateContext(d.ctx, func(t *hashfile.Tree) error {
		transfer.SetError(t, f.Src, msg)
		return nil
	}); uerr != nil {
		d.log.Error("cannot record ERROR in the transfer file", zap.String("src", f.Src), zap.Error(uerr))
	}
}

// backoff puts a file on back-off before its next attempt.
func (d *daemon) backoff(f transfer.File) *retry {
	r := d.retries[f.Src]
	if r == nil {
		r = &retry{}
		d.retries[f.Src] = r
	}
	r.delay = backoffCeiling(r.delay, d.cfg.RetryMin, d.cfg.RetryMax)
	r.wait = jittered(r.delay, d.rand())
	r.at = time.Now().Add(r.wait)
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

// report sends a status snapshot to OnStatus if anything changed.
func (d *daemon) report() {
	if d.cfg.OnStatus == nil {
		return
	}
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
		d.cfg.OnStatus(s)
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
	if d.cfg.OnStatus == nil {
		return
	}
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	s := d.lastShown
	s.LockWaitSince = d.lockWaitSince()
	if s != d.lastShown {
		d.lastShown = s
		d.cfg.OnStatus(s)
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
	if d.cfg.OnStatus == nil {
		return
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
		d.cfg.OnStatus(s)
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
