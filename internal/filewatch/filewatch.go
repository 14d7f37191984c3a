// Package filewatch reports changes of one file, such as SCR's transfer
// file. It watches the file's directory with inotify, so that a file
// created, recreated or replaced later is seen too. Only where inotify
// cannot be trusted does it also compare the file's metadata at a fixed
// interval: on network, cluster and FUSE file systems (found with
// statfs(2)'s f_type), where writes made by another node or by the FUSE
// server's other clients raise no event here, and where the directory
// cannot be watched at all. Elsewhere (ext4, xfs, tmpfs such as /dev/shm) an
// idle watcher never wakes.
package filewatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// Watch returns a channel that receives a value whenever the file at path
// may have changed; at most one value is pending, so bursts coalesce. The
// metadata is first taken before Watch returns, so a change made after the
// caller's next read is never missed. The metadata is compared every poll
// only where Polls says inotify is not enough. warn, if not nil, is told
// when notification is unavailable (only the poll remains) or reports an
// error. The watch stops when ctx is done.
func Watch(ctx context.Context, path string, poll time.Duration, warn func(msg string, err error)) <-chan struct{} {
	if warn == nil {
		warn = func(string, error) {}
	}
	w := &watcher{path: path, dir: filepath.Dir(path), name: filepath.Base(path), poll: poll, warn: warn,
		changed: make(chan struct{}, 1)}
	w.notify()
	usePoll, _ := Polls(w.dir, w.fsw != nil)
	w.last = stampOf(path)
	go w.run(ctx, usePoll)
	return w.changed
}

// watcher is the state of one Watch, owned by its goroutine once started.
type watcher struct {
	path, dir, name string
	poll            time.Duration
	warn            func(msg string, err error)
	changed         chan struct{}

	fsw    *fsnotify.Watcher // nil without notification
	events <-chan fsnotify.Event
	errs   <-chan error
	tick   *time.Ticker     // nil until polling starts
	tickC  <-chan time.Time // nil, never ready, unless polling
	last   stamp            // the file's metadata at the last poll
}

// notify watches the file's directory with inotify; where that fails only
// the poll remains, and warn says so.
func (w *watcher) notify() {
	fsw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fsw.Add(w.dir); err == nil {
			w.fsw, w.events, w.errs = fsw, fsw.Events, fsw.Errors
			return
		}
		fsw.Close()
	}
	w.warn("no file-system notification; polling only", err)
}

// run delivers changes until ctx is done, polling from the start when
// usePoll is set.
func (w *watcher) run(ctx context.Context, usePoll bool) {
	defer w.stop()
	if usePoll {
		w.startPoll()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.events:
			w.onEvent(ev, ok)
		case err, ok := <-w.errs:
			if !ok {
				w.errs = nil
			} else {
				w.warn("file-system notification error; rereading the file", err)
				w.signal()
			}
		case <-w.tickC:
			if s := stampOf(w.path); s != w.last {
				w.last = s
				w.signal()
			}
		}
	}
}

// onEvent handles one inotify event of the directory (ok false: the event
// channel closed, and only the poll remains).
func (w *watcher) onEvent(ev fsnotify.Event, ok bool) {
	switch {
	case !ok:
		w.events = nil
		w.startPoll()
	case filepath.Clean(ev.Name) == w.dir && ev.Has(fsnotify.Remove|fsnotify.Rename):
		// The directory itself went away: its watch is dead.
		w.startPoll()
		w.signal()
	case filepath.Base(ev.Name) == w.name:
		w.signal()
	}
}

// signal makes a value pending on changed unless one already is.
func (w *watcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// startPoll starts comparing the file's metadata every poll, once.
func (w *watcher) startPoll() {
	if w.tick == nil {
		w.tick = time.NewTicker(w.poll)
		w.tickC = w.tick.C
	}
}

// stop releases the watch and the ticker.
func (w *watcher) stop() {
	if w.fsw != nil {
		w.fsw.Close()
	}
	if w.tick != nil {
		w.tick.Stop()
	}
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

// Polls reports whether a watcher of files in dir must also poll their
// metadata, and why: when notification is unavailable (notify false), when
// dir's file system cannot be identified (it may not exist yet), and when it
// is one whose changes may escape inotify (see pollFS).
func Polls(dir string, notify bool) (bool, string) {
	var st unix.Statfs_t
	err := unix.Statfs(dir, &st)
	return decide(notify, int64(st.Type), err)
}

// decide is Polls' decision for a file system of type fsType, or one that
// statfs could not identify (err).
func decide(notify bool, fsType int64, err error) (bool, string) {
	switch name, ok := pollFS[fsType]; {
	case !notify:
		return true, "no file-system notification"
	case err != nil:
		return true, fmt.Sprintf("cannot identify the file system: %v", err)
	case ok:
		return true, name + ": changes made elsewhere raise no inotify event"
	}
	return false, "inotify sees every change"
}

// pollFS names the file systems (by statfs f_type) on which a file can
// change without an inotify event on this node: network and cluster file
// systems, where another node writes, and FUSE, where the server or another
// client does. The parallel file systems SCR flushes to whose magic numbers
// are not in Linux's magic.h come from their clients' sources.
var pollFS = map[int64]string{
	unix.NFS_SUPER_MAGIC:   "NFS",
	unix.SMB_SUPER_MAGIC:   "SMB",
	unix.SMB2_SUPER_MAGIC:  "SMB2",
	unix.CIFS_SUPER_MAGIC:  "CIFS",
	unix.CEPH_SUPER_MAGIC:  "CephFS",
	unix.AFS_SUPER_MAGIC:   "AFS",
	unix.AFS_FS_MAGIC:      "kAFS",
	unix.CODA_SUPER_MAGIC:  "Coda",
	unix.NCP_SUPER_MAGIC:   "NCP",
	unix.V9FS_MAGIC:        "9p",
	unix.OCFS2_SUPER_MAGIC: "OCFS2",
	unix.FUSE_SUPER_MAGIC:  "FUSE",
	0x01161970:             "GFS2",
	0x0bd00bd0:             "Lustre",
	0x47504653:             "GPFS",
	0xaad7aaea:             "PanFS",
	0x19830326:             "BeeGFS",
	0x20030528:             "OrangeFS",
}
