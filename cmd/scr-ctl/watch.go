package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// defaultPoll is how often a waiting command checks the transfer file's
// metadata when file-system notification says nothing: inotify does not
// see writes made on other nodes of a parallel file system.
const defaultPoll = 250 * time.Millisecond

// watchFile returns a channel that receives a value whenever the file at
// path may have changed (at most one pending value; bursts coalesce). It
// watches the file's directory with inotify, so a file created or replaced
// later is seen too, and compares the file's metadata every poll as a
// fallback. It stops when ctx is done.
func watchFile(ctx context.Context, path string, poll time.Duration) <-chan struct{} {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(filepath.Dir(path)); err == nil {
			events, errs = w.Events, w.Errors
		} else {
			w.Close()
			w = nil
		}
	}
	name := filepath.Base(path)
	last := statStamp(path) // taken before the caller's first read
	go func() {
		if w != nil {
			defer w.Close()
		}
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					events = nil
				} else if filepath.Base(ev.Name) == name {
					signal()
				}
			case _, ok := <-errs:
				if !ok {
					errs = nil
				} else {
					signal()
				}
			case <-tick.C:
				if s := statStamp(path); s != last {
					last = s
					signal()
				}
			}
		}
	}()
	return changed
}

// stamp identifies a version of a file by what stat(2) says of it.
type stamp struct {
	ino, size, mtime, ctime int64
	ok                      bool
}

func statStamp(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ok: true}
	}
	return stamp{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), ok: true}
}

// errTimeout marks a wait that reached its --timeout.
var errTimeout = errors.New("timed out")

// watchView reads the transfer file now and after every change, calling
// check with each reading, until check reports done (or returns an error),
// or ctx ends: then it returns an error wrapping errTimeout if ctx's
// deadline (timeout) passed, ctx.Err() otherwise (an interruption), with what the last reading said
// (describe) in the message. A file that cannot be read, or is missing, is
// an error.
func watchView(ctx context.Context, s *hashfile.Store, poll, timeout time.Duration,
	check func(v transfer.View) (done bool, err error), describe func(v transfer.View) string) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := watchFile(wctx, s.Path(), poll)
	for {
		t, err := readExisting(s)
		if err != nil {
			return err
		}
		last := transfer.Read(t)
		if done, err := check(last); err != nil || done {
			return err
		}
		select {
		case <-changed:
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
