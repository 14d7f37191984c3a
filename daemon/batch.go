package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Small files are flushed in batches: the worker copies and checks
// several, flush.Batch makes their data durable at once (one syncfs per
// local file system, else an fsync per file), publishes each under its name
// and makes the names durable, and the worker records them all in one
// locked update of the transfer file (WRITTEN = SIZE, CRC, no ERROR,
// WARNING). The transfer file is then read and rewritten once per batch
// instead of once per file, which is what made the cost of a file grow with
// the number of entries. Nothing is recorded before it is durable.
const (
	// maxBatchFiles bounds the files of one batch, further bounded by the
	// descriptors the process may open (batchFiles): a held copy keeps
	// its partial copy open, and perhaps a directory, until the batch is
	// durable.
	maxBatchFiles = 8192
	// maxBatchable is the largest file a batch takes: where the fixed
	// cost of a file (opens, fsyncs, the record) dominates its copy.
	// Larger files are copied one at a time, their progress recorded as
	// it becomes durable.
	maxBatchable = 4 << 20
	// batchLogFiles: a batch of more files is logged as a whole at info
	// (one line when it is recorded), its files' own lines at debug, so
	// that a flush of 100,000 small files does not write 200,000 lines to
	// the journal.
	batchLogFiles = 16
)

// batchable reports whether f may join a batch.
func (d *daemon) batchable(f transfer.File) bool {
	return f.Size <= min(maxBatchable, d.cfg.Flush.SyncBytes/4)
}

// pickBatch returns the files to copy next, in the transfer file's order:
// the first pending file alone when it is large, else the pending small
// files after it, up to maxBatchFiles and SyncBytes in all.
func (d *daemon) pickBatch(v transfer.View, now time.Time) []transfer.File {
	var files []transfer.File
	var bytes int64
	for _, f := range v.Files {
		if f.Problem != nil || !f.Pending() {
			continue
		}
		if r := d.retries[f.Src]; r != nil && now.Before(r.at) {
			continue
		}
		if !d.batchable(f) {
			if len(files) == 0 {
				return []transfer.File{f}
			}
			continue
		}
		files = append(files, f)
		bytes += f.Size
		if len(files) == d.batchFiles || bytes >= d.cfg.Flush.SyncBytes {
			break
		}
	}
	return files
}

// batchFiles is the most files a batch takes, given the soft limit on open
// descriptors: two per held copy at worst, with room left for the rest of
// the daemon.
func batchFiles() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return maxBatchFiles
	}
	return int(min(maxBatchFiles, max(16, (int64(lim.Cur)-256)/2)))
}

// startBatch starts the worker on several small files.
func (d *daemon) startBatch(files []transfer.File) {
	ctx, cancel := context.WithCancel(context.Background())
	agg := transfer.File{Src: files[0].Src, Dest: files[0].Dest}
	for _, f := range files {
		agg.Size += f.Size
		agg.Written += min(f.Written, f.Size)
	}
	j := &job{file: agg, cancel: cancel, started: time.Now(), from: agg.Written}
	j.durable.Store(agg.Written)
	for _, f := range files {
		sub := &job{file: f, cancel: cancel, from: f.Written, quiet: len(files) > batchLogFiles}
		sub.durable.Store(f.Written)
		j.subs = append(j.subs, sub)
	}
	d.job = j
	d.beat.workerStart()
	d.log.Debug("copy batch", zap.Int("files", len(files)), zap.String("first", files[0].Src), zap.Int64("bytes", agg.Size-agg.Written))
	go func() {
		d.results <- result{job: j, batch: d.copyBatch(ctx, j)}
	}()
}

// copyBatch runs in the worker goroutine: its streams (Config.Streams,
// each with its own Copier under the shared throttle) take the batch's
// files in order until they are all taken, the context ends or
// SyncInterval has passed (the rest waits for the next batch); then it
// makes the completed ones durable and records them in one update. It
// returns one result per file taken up.
func (d *daemon) copyBatch(ctx context.Context, j *job) []result {
	b := flush.NewBatch(d.throttle, d.cfg.Flush.SyncEach)
	start := time.Now()
	interval := d.cfg.Flush.SyncInterval
	results := make([]result, len(j.subs))
	var mu sync.Mutex
	next := 0
	take := func() int {
		mu.Lock()
		defer mu.Unlock()
		if next == len(j.subs) || ctx.Err() != nil || next > 0 && time.Since(start) >= interval {
			return -1
		}
		next++
		return next - 1
	}
	var wg sync.WaitGroup
	for _, c := range d.copiers[:min(len(d.copiers), len(j.subs))] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := take(); i >= 0; i = take() {
				sub := j.subs[i]
				sub.started, sub.batch, sub.copier = time.Now(), b, c
				f := sub.file
				d.log.Log(sub.level(), "copy", zap.String("src", f.Src), zap.String("dest", f.Dest),
					logging.Bytes("size", f.Size), logging.Bytes("from", f.Written))
				r := result{job: sub}
				before := sub.durable.Load()
				r.res, r.warnings, r.err = d.copyFile(ctx, sub)
				j.durable.Add(sub.durable.Load() - before)
				results[i] = r
			}
		}()
	}
	wg.Wait()
	copied := time.Now()
	// Durable and published first, all at once; then one update records
	// them all.
	_ = b.Sync(ctx)
	synced := time.Now()
	var out, done []result
	for _, r := range results[:next] {
		if r.err == nil && r.res.Held {
			r.res.Held = false
			if err := b.Err(r.job.file.Dest); err != nil {
				r.err = err
			} else {
				r.res.Complete, r.res.Written = true, r.job.file.Size
			}
		}
		if r.err == nil && r.res.Complete {
			done = append(done, r)
		} else {
			out = append(out, r)
		}
	}
	if len(done) == 0 {
		return out
	}
	changed := make([]bool, len(done))
	prevs := make([]int64, len(done))
	stored := make([]bool, len(done)) // durable set to SIZE under the lock
	_, wrote, err := d.store.UpdateContext(ctx, func(t *hashfile.Tree) error {
		for i := range done {
			r := &done[i]
			f := r.job.file
			prevs[i] = r.job.durable.Load()
			if !transfer.SetWrittenFrom(t, f, prevs[i], f.Size) {
				changed[i] = true
				continue
			}
			transfer.SetCRC(t, f, r.res.CRC)
			transfer.SetError(t, f.Src, "")
			transfer.SetWarning(t, f.Src, r.warnings)
			// Under the file's lock, as for a single file: the loop compares
			// the entries with durable under the same lock.
			r.job.durable.Store(f.Size)
			stored[i] = true
		}
		return nil
	})
	if err == nil {
		d.beat.workerBeat()
		if wrote {
			d.wroteOK.Store(true)
		}
	}
	d.log.Debug("batch recorded", zap.Int("files", len(done)), zap.Duration("copy", copied.Sub(start)),
		zap.Duration("sync", synced.Sub(copied)), zap.Duration("record", time.Since(synced)))
	for i := range done {
		r := &done[i]
		switch {
		case changed[i]:
			r.res.Complete, r.err = false, errEntryChanged
		case err != nil:
			if stored[i] {
				r.job.durable.Store(prevs[i])
			}
			r.res.Complete, r.err = false, fmt.Errorf("recording WRITTEN %d: %w", r.job.file.Size, err)
		default:
			if f := r.job.file; f.Size > prevs[i] {
				d.copied.Add(f.Size - prevs[i])
				j.durable.Add(f.Size - prevs[i])
			}
		}
	}
	return append(out, done...)
}
