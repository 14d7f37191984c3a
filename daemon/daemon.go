package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/internal/instance"
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

	state     transfer.State // as recorded in the file
	view      transfer.View  // last good view of the file
	fileErr   string         // last error reading the transfer file, logged once
	problems  map[string]bool
	warned    map[string]string // WARNING last logged, by source path
	retries   map[string]*retry // by source path
	job       *job              // copy under way, nil when idle
	results   chan result
	lastOK    time.Time
	lastShown Status
	copied    atomic.Int64 // bytes made durable by this process, for metrics
	meter     *rate.Meter  // the rate of copied while copying; nil while idle
}

type retry struct {
	delay time.Duration
	at    time.Time
}

// job is a copy under way in the worker goroutine.
type job struct {
	file    transfer.File
	cancel  context.CancelFunc
	started time.Time
	from    int64
	durable atomic.Int64 // written by the worker's commits
}

type result struct {
	job      *job
	res      flush.Result
	err      error
	warnings string // the checkpoint's warnings, "" if none or unchecked
}

// Run runs the daemon until the library asks it to EXIT (it returns nil)
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
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("control directory of %s: %w", path, err)
	}
	for _, p := range append(append([]string{}, cfg.AllowSrc...), cfg.AllowDest...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("allowed prefix %q is not an absolute path", p)
		}
	}
	store := hashfile.NewStore(path, cfg.Locking)
	if !cfg.Insecure {
		if err := checkControlDir(filepath.Dir(path)); err != nil {
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
	if !cfg.Insecure {
		store.Guard(transferFileGuard)
		var r *refusal
		if _, err := store.Read(); errors.As(err, &r) || errors.Is(err, hashfile.ErrSymlink) {
			return err
		}
	}
	th := flush.NewThrottle()
	d := &daemon{
		cfg:      cfg,
		log:      cfg.Log,
		store:    store,
		throttle: th,
		copier:   flush.NewCopier(th, cfg.Flush),
		problems: map[string]bool{},
		warned:   map[string]string{},
		retries:  map[string]*retry{},
		results:  make(chan result, 1),
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

	d.log.Info("started", zap.String("transfer_file", d.cfg.TransferFile),
		zap.String("instance_lock", instance.LockPath(d.cfg.TransferFile)), zap.Int("pid", os.Getpid()),
		zap.String("locking", d.cfg.Locking.String()), zap.String("verify", d.cfg.Verify.String()))
	d.state = transfer.Stopped
	d.sync(true)
	for {
		if d.state == transfer.Exiting && d.job == nil {
			d.log.Info("exiting on the library's EXIT")
			return nil
		}
		// Arm the retry timer for the earliest file waiting out its back-off.
		// Not while the transfer file is unusable: the retry could not be
		// taken, and a timer already due would fire again at once.
		if at, ok := d.nextRetry(); ok && d.job == nil && d.state == transfer.Running && d.fileErr == "" {
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
		select {
		case <-ctx.Done():
			return d.shutdown()
		case <-changed:
			d.sync(false)
		case <-reread.C:
			d.sync(false)
		case <-retryTimer.C:
			d.sync(false)
		case <-progress:
			d.report()
		case r := <-d.results:
			d.finish(r)
			d.sync(false)
		}
	}
}

// shutdown stops the copy under way at a consistent point (WRITTEN covers
// only durable bytes) and records EXITING.
func (d *daemon) shutdown() error {
	d.log.Info("signal received: stopping")
	if d.job != nil {
		d.job.cancel()
		d.finish(<-d.results)
	}
	d.state = transfer.Exiting
	if _, _, err := d.store.Update(func(t *hashfile.Tree) error {
		transfer.SetState(t, transfer.Exiting)
		return nil
	}); err != nil {
		d.log.Error("cannot record EXITING", zap.Error(err))
	}
	d.report()
	return nil
}

// sync reads the transfer file under its lock, decides the state, records
// what must be recorded, and then starts or stops the copy to match.
func (d *daemon) sync(first bool) {
	if !d.cfg.Insecure {
		if err := checkControlDir(filepath.Dir(d.cfg.TransferFile)); err != nil {
			d.fileError(err)
			return
		}
	}
	var v transfer.View
	var want, next transfer.State
	var done bool
	_, _, err := d.store.Update(func(t *hashfile.Tree) error {
		v = transfer.Read(t)
		for i := range v.Files {
			if v.Files[i].Problem == nil {
				v.Files[i].Problem = d.confine(v.Files[i])
			}
		}
		refuseConflicts(v.Files)
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
		d.recordProblems(t, v)
		return nil
	})
	if err != nil {
		d.fileError(err)
		return
	}
	if d.fileErr != "" {
		d.log.Info("transfer file readable again")
		d.fileErr = ""
	}
	d.applyLimits(v)
	if next != d.state {
		d.log.Info("state", zap.String("from", string(d.state)), zap.String("to", string(next)),
			zap.String("command", string(v.Command)))
	}
	if done {
		d.log.Info("flush complete: FLAG DONE set")
	}
	if v.Unknown != "" && !d.problems["COMMAND "+v.Unknown] {
		d.problems["COMMAND "+v.Unknown] = true
		d.log.Warn("unknown COMMAND ignored", zap.String("command", v.Unknown))
	}
	d.state = next
	d.view = v
	d.forgetRetries(v)
	d.schedule(v, want)
	d.report()
}

// fileError logs a problem with the transfer file once, until it changes.
func (d *daemon) fileError(err error) {
	if msg := err.Error(); msg != d.fileErr {
		d.fileErr = msg
		d.log.Error("cannot use the transfer file; keeping the last good view", zap.Error(err))
	}
}

// applyLimits hands BW and PERCENT to the throttle, keeping the last good
// value of a malformed one.
func (d *daemon) applyLimits(v transfer.View) {
	if !v.BWBad {
		d.throttle.SetBW(v.BW)
	}
	if !v.PercentBad {
		d.throttle.SetPercent(v.Percent)
	}
	for _, p := range v.Problems {
		if key := "top " + p.Error(); !d.problems[key] {
			d.problems[key] = true
			d.log.Warn("malformed value in the transfer file ignored", zap.Error(p))
		}
	}
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
// way when the state or its entry no longer calls for it.
func (d *daemon) schedule(v transfer.View, want transfer.State) {
	if d.job != nil {
		if want != transfer.Running || !d.stillWanted(v, d.job.file) {
			d.job.cancel()
		}
		return
	}
	if d.state != transfer.Running {
		return
	}
	now := time.Now()
	for _, f := range v.Files {
		if f.Problem != nil || !f.Pending() {
			continue
		}
		if r := d.retries[f.Src]; r != nil && now.Before(r.at) {
			continue
		}
		d.start(f)
		return
	}
}

func (d *daemon) stillWanted(v transfer.View, f transfer.File) bool {
	for _, g := range v.Files {
		if g.Src == f.Src {
			return g.Dest == f.Dest && g.Size == f.Size && g.Problem == nil
		}
	}
	return false
}

func (d *daemon) start(f transfer.File) {
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{file: f, cancel: cancel, started: time.Now(), from: f.Written}
	j.durable.Store(f.Written)
	d.job = j
	d.log.Info("copy", zap.String("src", f.Src), zap.String("dest", f.Dest),
		zap.Int64("size", f.Size), zap.Int64("from", f.Written))
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
	var v *checkpointVerifier
	if d.cfg.Verify.before() {
		root := fj.SrcRoot
		if root == "" {
			root = "/"
		}
		v = &checkpointVerifier{path: f.Src, root: root, pace: d.throttle.Pace}
		fj.Verify = v
	}
	// The final commit records WRITTEN = SIZE, the CRC and the end of any
	// ERROR in one update, so that no crash can leave a complete file
	// without its CRC.
	commit := func(n int64, crc uint32) error {
		ok := true
		_, _, err := d.store.Update(func(t *hashfile.Tree) error {
			ok = transfer.SetWritten(t, f, n)
			if ok && n == f.Size {
				transfer.SetCRC(t, f, crc)
				transfer.SetError(t, f.Src, "")
				transfer.SetWarning(t, f.Src, v.warnings())
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("recording WRITTEN %d: %w", n, err)
		}
		if !ok {
			return errEntryChanged
		}
		if prev := j.durable.Swap(n); n > prev {
			d.copied.Add(n - prev)
		}
		return nil
	}
	res, err := d.copier.Copy(ctx, fj, commit)
	return res, v.warnings(), err
}

// finish handles the end of a copy in the loop goroutine.
func (d *daemon) finish(r result) {
	d.job = nil
	r.job.cancel()
	f := r.job.file
	if r.res.Restarted != "" {
		d.log.Warn("resume impossible; copied from the start", zap.String("src", f.Src), zap.String("reason", r.res.Restarted))
	}
	switch {
	case r.err == nil && r.res.Complete:
		delete(d.retries, f.Src)
		if r.warnings != d.warned[f.Src] {
			if r.warnings != "" {
				d.log.Warn("checkpoint flushed with a warning", zap.String("src", f.Src), zap.String("warning", r.warnings))
			}
			d.warned[f.Src] = r.warnings
		}
		d.lastOK = time.Now()
		secs := time.Since(r.job.started).Seconds()
		d.log.Info("flushed", zap.String("src", f.Src), zap.String("dest", f.Dest), zap.Int64("size", f.Size),
			zap.String("crc", hashfile.FormatCRC(r.res.CRC)), zap.Float64("seconds", secs),
			zap.Float64("mb_per_s", float64(f.Size-r.job.from)/1e6/max(secs, 1e-9)))
	case r.err == nil:
		// Stopped without an error: nothing to record.
	case errors.Is(r.err, context.Canceled):
		d.log.Info("copy stopped", zap.String("src", f.Src), zap.Int64("written", r.job.durable.Load()))
	case errors.Is(r.err, errEntryChanged):
		d.log.Info("copy abandoned: entry removed or replaced", zap.String("src", f.Src))
	default:
		d.fail(f, r.err)
	}
}

// fail records a file's error in the log and the transfer file and puts
// the file on back-off.
func (d *daemon) fail(f transfer.File, err error) {
	r := d.retries[f.Src]
	if r == nil {
		r = &retry{}
		d.retries[f.Src] = r
	}
	r.delay = min(max(r.delay*2, d.cfg.RetryMin), d.cfg.RetryMax)
	r.at = time.Now().Add(r.delay)
	msg := err.Error()
	d.log.Error("copy failed", zap.String("src", f.Src), zap.String("dest", f.Dest),
		zap.Error(err), zap.Duration("retry_in", r.delay))
	if _, _, uerr := d.store.Update(func(t *hashfile.Tree) error {
		transfer.SetError(t, f.Src, msg)
		return nil
	}); uerr != nil {
		d.log.Error("cannot record ERROR in the transfer file", zap.String("src", f.Src), zap.Error(uerr))
	}
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
	for src := range d.retries {
		if !present[src] {
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
	s := Status{State: d.state, LastSuccess: d.lastOK, BytesCopied: d.copied.Load()}
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
	if s != d.lastShown {
		d.lastShown = s
		d.cfg.OnStatus(s)
	}
}
