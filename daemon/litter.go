package daemon

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Partial copies the transfer file no longer needs are removed, so that no
// hidden .scrpart stays in a dataset directory for good: when an entry is
// removed or its DESTINATION or SIZE changes (SCR_Finalize clears FILES
// while a flush runs), and, once at start, any partial copy in a directory
// the transfer file names that no entry of it accounts for. A partial copy
// another process holds locked is being written by it, and is left alone;
// so is one whose record names another owner (another transfer file, or
// another node: in SCR every node flushes into one dataset directory, and
// where flock is node-local or missing the lock cannot tell). Only
// destinations the daemon may write (--allow-dest) are touched.

// noteStale records the partial copies of the entries of old that now are
// gone or name another DESTINATION or SIZE.
func (d *daemon) noteStale(old, now transfer.View) {
	if len(old.Files) == 0 || sameEntries(old.Files, now.Files) {
		return
	}
	cur := make(map[string]transfer.File, len(now.Files))
	for _, f := range now.Files {
		cur[f.Src] = f
	}
	for _, f := range old.Files {
		if f.Dest == "" || d.confine(f) != nil {
			continue
		}
		if g, ok := cur[f.Src]; ok && g.Dest == f.Dest && g.Size == f.Size {
			continue
		}
		d.stale[flush.TempPath(f.Dest)] = true
	}
}

// removeStale removes the partial copies noted stale, except the one the
// copy under way still holds: that copy is being stopped, and the next
// pass, which comes once it has, removes it before any new copy starts.
func (d *daemon) removeStale() {
	for _, p := range slices.Sorted(maps.Keys(d.stale)) {
		if d.writing(p) {
			continue
		}
		delete(d.stale, p)
		d.removePartial(p, "its FILES entry was removed or changed")
	}
}

// writing tells whether the copy under way (or a file of its batch) writes
// the partial copy p.
func (d *daemon) writing(p string) bool {
	if d.job == nil {
		return false
	}
	if d.job.file.Dest != "" && flush.TempPath(d.job.file.Dest) == p {
		return true
	}
	for _, sub := range d.job.subs {
		if flush.TempPath(sub.file.Dest) == p {
			return true
		}
	}
	return false
}

// sweepAtStart removes the partial copies that no entry accounts for in
// the destination directories the transfer file names.
func (d *daemon) sweepAtStart(v transfer.View) {
	named := make(map[string]bool, len(v.Files))
	dirs := map[string]bool{}
	for _, f := range v.Files {
		if f.Dest == "" {
			continue
		}
		named[flush.TempPath(f.Dest)] = true
		if d.confine(f) == nil {
			dirs[filepath.Dir(filepath.Clean(f.Dest))] = true
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(dirs)) {
		root, _ := confinedRoot(dir, d.cfg.AllowDest)
		paths, err := flush.Partials(dir, root)
		if err != nil {
			d.log.Warn("cannot look for leftover partial copies", zap.String("dir", dir), zap.Error(err))
			continue
		}
		for _, p := range paths {
			if !named[p] {
				d.removePartial(p, "the transfer file names no such destination")
			}
		}
	}
}

// removePartial removes one partial copy and logs what happened.
func (d *daemon) removePartial(p, why string) {
	root, _ := confinedRoot(p, d.cfg.AllowDest)
	removed, err := flush.RemovePartial(p, root, d.cfg.Flush.Owner)
	switch {
	case removed:
		d.log.Info("removed partial copy", zap.String("path", p), zap.String("reason", why))
	case errors.Is(err, flush.ErrPartialLocked):
		d.log.Info("partial copy left: another process is writing it", zap.String("path", p))
	case errors.Is(err, flush.ErrPartialForeign):
		d.log.Debug("partial copy left: written for another transfer file or node", zap.String("path", p), zap.Error(err))
	case err != nil:
		d.log.Warn("cannot remove partial copy", zap.String("path", p), zap.Error(err))
	}
}

// partialOwner names who this daemon writes partial copies for: the host
// and the transfer file it serves (flush.Options.Owner). In SCR every
// node flushes into one dataset directory; a daemon touches only the
// partial copies written under its own name.
func partialOwner(transferFile string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return host + "\x00" + transferFile
}
