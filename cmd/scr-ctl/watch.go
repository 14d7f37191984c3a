package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// defaultPoll is how often a waiting command checks the transfer file's
// metadata when file-system notification says nothing: inotify does not
// see writes made on other nodes of a parallel file system.
const defaultPoll = 250 * time.Millisecond

// defaultGrace is how long a waiting command tolerates finding no daemon
// before failing: time for a daemon being started or restarted to take
// its lock and record its state, short enough for a job script.
const defaultGrace = 5 * time.Second

// errTimeout marks a wait that reached its --timeout.
var errTimeout = errors.New("timed out")

// watchView reads the transfer file now and after every change, calling
// check with each reading (watchViewEvery: and again with the latest one
// every recheck, for conditions outside the file), until check reports done (or returns an error),
// or ctx ends: then it returns an error wrapping errTimeout if ctx's
// deadline (timeout) passed, ctx.Err() otherwise (an interruption), with what the last reading said
// (describe) in the message. A file that cannot be read, or is missing, is
// an error.
func watchView(ctx context.Context, s *hashfile.Store, poll, timeout time.Duration,
	check func(v transfer.View) (done bool, err error), describe func(v transfer.View) string) error {
	return watchViewEvery(ctx, s, poll, timeout, 0, check, describe)
}

// watchViewEvery is watchView with a recheck period.
func watchViewEvery(ctx context.Context, s *hashfile.Store, poll, timeout, recheck time.Duration,
	check func(v transfer.View) (done bool, err error), describe func(v transfer.View) string) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := filewatch.Watch(wctx, s.Path(), poll, nil)
	var tick <-chan time.Time
	if recheck > 0 {
		t := time.NewTicker(recheck)
		defer t.Stop()
		tick = t.C
	}
	reread := true
	var last transfer.View
	for {
		if reread {
			t, err := readExisting(s)
			if err != nil {
				return err
			}
			last = transfer.Read(t)
		}
		if done, err := check(last); err != nil || done {
			return err
		}
		select {
		case <-changed:
			reread = true
		case <-tick:
			reread = false
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w after %s: %s", errTimeout, timeout, describe(last))
			}
			return fmt.Errorf("interrupted (%w): %s", ctx.Err(), describe(last))
		}
	}
}

// withTimeout returns ctx bounded by d when d > 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// checkDurations checks the --timeout, --grace and --poll of a waiting
// command.
func checkDurations(timeout, grace, poll time.Duration) error {
	switch {
	case timeout < 0:
		return usageError{fmt.Sprintf("--timeout %v: must not be negative (0 waits for ever)", timeout)}
	case grace < 0:
		return usageError{fmt.Sprintf("--grace %v: must not be negative", grace)}
	case poll <= 0:
		return usageError{fmt.Sprintf("--poll %v: must be positive", poll)}
	}
	return nil
}
