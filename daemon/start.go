package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
)

// Run runs the daemon until COMMAND EXIT (it returns nil)
// or ctx is cancelled (a signal: it stops the copy at a consistent point,
// records EXITING and returns nil). It returns an error if it cannot
// start, or if another process took its instance lock.
func Run(ctx context.Context, cfg Config) error {
	d, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-d.Done()
	return d.Err()
}

// Start starts a daemon and returns its handle once the daemon holds its
// instance lock and has made its first pass over the transfer file: Ready
// is closed then if that pass recorded the first STATE (otherwise when a
// later pass does, the daemon retrying a transfer file it cannot use on
// its back-off). It returns an error, and leaves nothing running, if the
// daemon cannot start: a missing or untrusted control directory or
// transfer file, or an instance lock another process holds. Cancelling
// ctx stops the daemon as SIGTERM does, as Close does.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	d, inst, err := prepare(ctx, cfg)
	if err != nil {
		return nil, err
	}
	h := newHandle(ctx, d)
	d.ctx = h.ctx
	d.life = h.life
	d.lost = watchInstance(h.ctx, inst, d.log)
	firstPass := make(chan struct{})
	go func() {
		defer inst.Close()
		h.end(d.loop(h.ctx, firstPass))
	}()
	select {
	case <-firstPass:
	case <-h.life.done:
	}
	return h, nil
}

// prepare checks the configuration, the control directory and the
// transfer file, takes the instance lock and builds the daemon; the
// caller runs its loop and closes the lock.
func prepare(ctx context.Context, cfg Config) (*daemon, *instance.Lock, error) {
	cfg.setDefaults()
	if err := cfg.resolve(); err != nil {
		return nil, nil, err
	}
	path := cfg.TransferFile
	// One daemon per transfer file, before anything is written: a second
	// daemon would resume the same partial copies and fight over STATE.
	// The kernel releases the lock however this process ends.
	inst, err := instance.Acquire(path)
	if err != nil {
		return nil, nil, err
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		inst.Close()
		return nil, nil, err
	}
	return newDaemon(cfg, store), inst, nil
}

// resolve makes the transfer file's path absolute, derives the copy's
// options that follow from the others, and checks the control directory
// and the allowed prefixes.
func (cfg *Settings) resolve() error {
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
	if !cfg.Insecure {
		if err := checkControlDir(filepath.Dir(path), cfg.StrictModes); err != nil {
			return err
		}
	}
	return nil
}

// openStore creates or guards the transfer file and returns its store,
// refusing a transfer file the trust policy does not accept.
func openStore(ctx context.Context, cfg Config) (*hashfile.Store, error) {
	path := cfg.TransferFile
	store := hashfile.NewStore(path, cfg.Locking)
	if err := createTransferFile(path, cfg.StrictModes); err != nil {
		return nil, err
	}
	store.CreateMode(createMode(cfg.StrictModes))
	if !cfg.Insecure {
		store.Guard(transferFileGuard(cfg.StrictModes))
		var r *refusal
		if _, err := store.ReadContext(ctx); errors.As(err, &r) || errors.Is(err, hashfile.ErrSymlink) {
			return nil, err
		}
	}
	return store, nil
}

// newDaemon builds the daemon of cfg (with its defaults) on store: the
// throttle, a copier per stream, the descriptor plan and the heartbeat.
func newDaemon(cfg Config, store *hashfile.Store) *daemon {
	th := flush.NewThrottle()
	th.SetAuto(cfg.BWAuto)
	d := &daemon{
		cfg:      cfg.Settings,
		log:      cfg.Log,
		onStatus: cfg.OnStatus,
		beat:     cfg.Heartbeat,
		store:    store,
		throttle: th,
		copier:   flush.NewCopier(th, cfg.Flush),
		results:  make(chan result, 1),
		retries:  map[string]*retry{},
		rand:     rand.Float64,
		loopState: loopState{
			stale:     map[string]bool{},
			published: map[string]*unrecorded{},
		},
		logOnce: logOnce{problems: map[string]bool{}, warned: map[string]string{}},
	}
	d.batchFiles = batchFiles()
	d.copiers = []*flush.Copier{d.copier}
	for len(d.copiers) < cfg.Streams {
		d.copiers = append(d.copiers, flush.NewCopier(th, cfg.Flush))
	}
	d.planDescriptors()
	if d.beat == nil {
		d.beat = NewHeartbeat(0)
	}
	d.clock = wakeClock{reread: cfg.Reread, beat: d.beat.every, progress: cfg.ProgressEvery}
	d.beat.setWorkerGrace(2 * max(cfg.Flush.SyncInterval, flush.DefaultSyncInterval))
	store.OnLockWait(d.lockWait)
	if cfg.Locking == hashfile.Fcntl {
		store.Settle(cfg.FcntlSettle)
		store.OnSettleWait(d.settleWait)
	}
	return d
}
