package daemon

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// watch reports changes of the file at path on the returned channel (one
// pending signal at most; bursts coalesce). It watches the directory with
// inotify, so a file that is recreated or replaced is still seen, and polls
// the file's metadata every poll as a safety net for file systems where
// inotify does not see other nodes' writes. It stops when ctx is done.
func watch(ctx context.Context, path string, poll time.Duration, log *zap.Logger) <-chan struct{} {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(filepath.Dir(path)); err != nil {
			w.Close()
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if err != nil {
		log.Warn("no file-system notification; polling the transfer file only", zap.Error(err), zap.Duration("poll", poll))
	} else {
		events, errs = w.Events, w.Errors
	}
	go func() {
		if w != nil && events != nil {
			defer w.Close()
		}
		tick := time.NewTicker(poll)
		defer tick.Stop()
		last := stamp(path)
		name := filepath.Base(path)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					events = nil
					continue
				}
				if filepath.Base(ev.Name) == name {
					signal()
				}
			case err, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				log.Warn("file-system notification error; the poll continues", zap.Error(err))
				signal()
			case <-tick.C:
				if s := stamp(path); s != last {
					last = s
					signal()
				}
			}
		}
	}()
	return changed
}

// fileStamp identifies a version of a file by what stat(2) says of it.
type fileStamp struct {
	ino, size    int64
	mtime, ctime int64
	exists       bool
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano(), exists: true}
	}
	return fileStamp{
		ino:    int64(st.Ino),
		size:   st.Size,
		mtime:  st.Mtim.Nano(),
		ctime:  st.Ctim.Nano(),
		exists: true,
	}
}
