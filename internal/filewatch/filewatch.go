// Package filewatch reports changes of one file, such as SCR's transfer
// file. It watches the file's directory with inotify, so that a file
// created, recreated or replaced later is seen too, and compares the file's
// metadata at a fixed interval as a safety net for file systems where
// inotify does not see writes made elsewhere (other nodes of a parallel
// file system).
package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch returns a channel that receives a value whenever the file at path
// may have changed; at most one value is pending, so bursts coalesce. The
// metadata is first taken before Watch returns, so a change made after the
// caller's next read is never missed. warn, if not nil, is told when
// notification is unavailable (only the poll remains) or reports an error.
// The watch stops when ctx is done.
func Watch(ctx context.Context, path string, poll time.Duration, warn func(msg string, err error)) <-chan struct{} {
	if warn == nil {
		warn = func(string, error) {}
	}
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
	if err != nil {
		warn("no file-system notification; polling only", err)
	}
	name := filepath.Base(path)
	last := stampOf(path)
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
			case err, ok := <-errs:
				if !ok {
					errs = nil
				} else {
					warn("file-system notification error; the poll continues", err)
					signal()
				}
			case <-tick.C:
				if s := stampOf(path); s != last {
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
	exists                  bool
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), exists: true}
	}
	return stamp{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(), exists: true}
}
