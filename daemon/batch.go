package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// several, flush.Batch makes the data of a group of them durable at once
// (one syncfs per local file system, else an fsync per file), publishes
// each under its name and makes the names durable, and the worker records
// the group in one locked update of the transfer file (WRITTEN = SIZE,
// CRC, no ERROR, WARNING). The transfer file is then read and rewritten
// once per group instead of once per file, which is what made the cost of
// a file grow with the number of entries. Nothing is recorded before it is
// durable.
const (
	// maxBatchFiles bounds the files of one group of a batch, further
	// bounded by the descriptors the process may open (batchFiles): a
	// held copy keeps its partial copy open, and perhaps a directory,
	// until its group is durable.
	maxBatchFiles = 8192
	// batchLogFiles: a batch of more files is logged as a whole at info
	// (one line when it is recorded), its files' own lines at debug, so
	// that a flush of 100,000 small files does not write 200,000 lines to
	// the journal.
	batchLogFiles = 16
)

// batchable reports whether f may join a batch of several files
// (flush.BatchMax); a larger file is a batch of one, its progress
// recorded as it becomes durable.
func (d *daemon) batchable(f transfer.File) bool {
	return f.Size <= flush.BatchMax(d.cfg.Flush)
}

// pickBatch returns the files to copy next, in the transfer file's order:
// the first pending file alone when it is large, else the pending small
// files after it, up to maxGroups groups (maxGroups × SyncBytes, and
// maxGroups × groupFiles(1) files).
func (d *daemon) pickBatch(v transfer.View, now time.Time) []transfer.File {
	// Room for the largest batch up front: growing the slice a file at a
	// time copied it a dozen times at 2000 files.
	most := maxGroups * d.groupFiles(1)
	files := make([]transfer.File, 0, min(len(v.Files), most))
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
		if len(files) == most || bytes >= maxGroups*d.cfg.Flush.SyncBytes {
			break
		}
	}
	return files
}

// batchFiles is the most files a group of a batch takes when two groups
// are held at once (groups that overlap), given the soft limit on open
// descriptors: two per held copy at worst, with room left for the rest of
// the daemon.
func batchFiles() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return maxBatchFiles
	}
	return int(min(maxBatchFiles, max(16, (int64(lim.Cur)-256)/4)))
}

// Descriptors a batch needs besides its held copies' (see planDescriptors).
const (
	// fdsPerStream: a stream's copy in flight holds its source, its
	// partial copy, perhaps a directory and a duplicate of the source for
	// its check, and a confined lookup opens two more for a moment.
	fdsPerStream = 6
	// fdsReserve: the rest of the daemon (the transfer file and its lock
	// while read or updated, the watch, the notify socket, a listing of a
	// directory) and the lookups of a group being published, up to four
	// at once, two descriptors each.
	fdsReserve = 16
)

// descriptorPlan returns how many streams a batch runs and how many
// descriptors each of its groups may keep open when two are held at once
// (twice as many when one is), given the soft RLIMIT_NOFILE limit, the
// descriptors open already and the streams configured: at least one
// stream, and room for one file and its directory in a group. With a
// directory per file and a low limit (32: 1411 files of a flush went
// through an ERROR, "too many open files") a group's descriptors are
// mostly directories; a group then closes early rather than failing.
func descriptorPlan(limit, inUse, streams int) (int, int) {
	avail := limit - inUse - fdsReserve
	s := max(1, min(streams, (avail-4)/fdsPerStream))
	return s, max(2, (avail-s*fdsPerStream)/2)
}

// planDescriptors sets the streams and the descriptors a batch's groups
// may hold (descriptorPlan) from the soft RLIMIT_NOFILE and the
// descriptors open now; nothing where the limit is unknown or huge.
func (d *daemon) planDescriptors() {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<24 {
		return
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	d.streams, d.groupFDs = descriptorPlan(int(lim.Cur), len(open), len(d.copiers))
}

// groupFiles is the most files a group takes when held groups are held at
// once: batchFiles for two, twice as many (within maxBatchFiles) for one,
// since each group costs a sync and a rewrite of the transfer file (see
// BenchmarkGroupFiles).
func (d *daemon) groupFiles(held int) int {
	if held >= 2 {
		return d.batchFiles
	}
	return min(maxBatchFiles, 2*d.batchFiles)
}

// startBatch starts the worker on files: several small files, or a
// larger one alone.
func (d *daemon) startBatch(files []transfer.File) {
	ctx, cancel := context.WithCancel(context.Background())
	agg := transfer.File{Src: files[0].Src, Dest: files[0].Dest}
	for _, f := range files {
		agg.Size += f.Size
		agg.Written += min(f.Written, f.Size)
	}
	j := &job{file: agg, cancel: cancel, started: time.Now(), from: agg.Written}
	j.durable.Store(agg.Written)
	// The files' jobs in one allocation.
	subs := make([]job, len(files))
	j.subs = make([]*job, len(files))
	for i, f := range files {
		sub := &subs[i]
		sub.file, sub.cancel, sub.from, sub.quiet = f, cancel, f.Written, len(files) > batchLogFiles
		sub.reuse, sub.parent = d.published[f.Src], j
		sub.durable.Store(f.Written)
		j.subs[i] = sub
		if !sub.quiet {
			d.logAttempt(f, d.retries[f.Src])
		}
	}
	d.job = j
	d.beat.workerStart()
	d.log.Debug("copy batch", zap.Int("files", len(files)), zap.String("first", files[0].Src), zap.Int64("bytes", agg.Size-agg.Written))
	go func() {
		d.results <- result{job: j, batch: d.copyBatch(ctx, j)}
	}()
}

// A batch is made durable and recorded group by group, each group at
// most SyncBytes and batchFiles files. While one group is made durable
// (its syncfs waits for the disk) and recorded, the streams copy the next
// one: the disk writes one group while the CPUs copy another, instead of
// each waiting for the other. At most two groups are held at once, the one
// being copied and the one being made durable, so that a batch never holds
// more than twice a group's descriptors or unsynced bytes; the streams
// wait before starting a third. Groups of files smaller than overlapMin on
// average do not overlap: making thousands of tiny files durable is
// mostly writing their inodes, which the creation of the next group's
// files then waits for (20,000 files of 1 KiB took 3.0 s overlapped
// against 2.5 s one group after the other, while 2000 files of 64 KiB took
// 0.37 s against 0.44 s).
const (
	maxGroups  = 4        // groups a batch is picked for
	overlapMin = 32 << 10 // smallest average file size whose groups overlap
)

// groupEvent is a step of a group's life, reported to daemon.onGroup.
type groupEvent int

const (
	groupOpened    groupEvent = iota // its first file is taken
	groupSyncing                     // its copies are done: made durable and published next
	groupDurable                     // durable and published: recorded next
	groupRecording                   // its record begins
	groupRecorded                    // recorded
)

// group is the part of a batch that is made durable and recorded at once.
type group struct {
	b      *flush.Batch
	index  int       // of the group in its batch, from 0
	first  int       // its first file, an index into the batch's subs
	end    int       // one past its last; final once it is handed over
	opened time.Time // when its first file was taken
	// copied and durable: when its copies were done, and when it was
	// made durable and published.
	copied, durable time.Time
	copies          sync.WaitGroup
	made            chan struct{} // closed once made durable and published
	synced          chan struct{} // closed once made durable and recorded
}

// groupEnds returns where each group of subs ends: a group closes once it
// holds SyncBytes, or files files, or before its held copies would keep
// more than fds descriptors open (0: no bound): one per partial copy, and
// one per directory the Batch opens for them.
func (d *daemon) groupEnds(subs []*job, files, fds int) []int {
	var ends []int
	var bytes int64
	n, used := 0, 0
	dirs := map[string]bool{}
	for i, sub := range subs {
		dir := filepath.Dir(filepath.Clean(sub.file.Dest))
		cost := 1
		if !dirs[dir] {
			cost++
		}
		if fds > 0 && n > 0 && used+cost > fds {
			ends = append(ends, i)
			bytes, n, used = 0, 0, 0
			clear(dirs)
			cost = 2
		}
		dirs[dir] = true
		bytes += sub.file.Size - min(sub.file.Written, sub.file.Size)
		n++
		used += cost
		if bytes >= d.cfg.Flush.SyncBytes || n == files {
			ends = append(ends, i+1)
			bytes, n, used = 0, 0, 0
			clear(dirs)
		}
	}
	if n > 0 {
		ends = append(ends, len(subs))
	}
	return ends
}

// copyBatch runs in the worker goroutine: its streams (Config.Streams,
// each with its own Copier under the shared throttle) take the batch's
// files in order until they are all taken, the context ends or the group
// being copied has been open for SyncInterval (the rest waits for the next
// batch); each group's completed copies are made durable and recorded in
// one update, while the streams copy the next group. It returns one result
// per file taken up, in the batch's order.
func (d *daemon) copyBatch(ctx context.Context, j *job) []result {
	b := d.newBatchRun(ctx, j)
	defer b.cancelGrace()
	copiesOver := make(chan struct{}) // closed once the streams are done
	recorded := b.recordInOrder(b.syncGroups(), copiesOver)
	b.runStreams()
	close(copiesOver)
	taken := b.handLast()
	close(b.handed)
	<-recorded
	return b.results[:taken] // every file taken is in a group, each recorded
}

// batchRun is the state of one copyBatch: the groups its streams open and
// hand over, in order, to be made durable and recorded.
type batchRun struct {
	d   *daemon
	j   *job
	ctx context.Context // the batch's: ended when it is stopped
	// grace is the context of the batch's records and commits: the copies
	// the batch publishes are recorded, and the progress of a copy
	// interrupted is saved, even once ctx ends, if the lock comes within
	// the grace (see commitGrace).
	grace       context.Context
	cancelGrace context.CancelFunc
	// held is how many groups may be held at once: the one being copied,
	// and the one before it being made durable when they overlap.
	held    int
	ends    []int       // where each group ends (groupEnds)
	results []result    // one per file, in the batch's order
	handed  chan *group // groups taken in full, in order

	mu     sync.Mutex
	groups []*group // opened, in order; the first given of them handed over
	given  int
	next   int // the next file to take
}

// newBatchRun prepares the copy of the batch j under ctx.
func (d *daemon) newBatchRun(ctx context.Context, j *job) *batchRun {
	b := &batchRun{d: d, j: j, ctx: ctx, held: 1}
	if n := int64(len(j.subs)); n > 0 && (j.file.Size-j.file.Written)/n >= overlapMin {
		b.held = 2
	}
	b.ends = d.groupEnds(j.subs, d.groupFiles(b.held), d.groupFDs*(3-b.held))
	b.grace, b.cancelGrace = d.graceContext(ctx)
	b.results = make([]result, len(j.subs))
	b.handed = make(chan *group, len(b.ends))
	return b
}

// syncGroups makes each group handed over durable as soon as its copies
// are done, each in a goroutine of its own, and passes the groups on in
// order once their syncs are started: the next group's sync need not wait
// for the record of the one before (a rewrite of the whole transfer file
// and its fsync, 5 to 15 ms at 2000 entries), nor for the end of its sync.
// A syncfs makes the whole file system durable, and the last step of a
// group's sync, the syncfs for its names, waits for the data of the next
// group as well, whose copies are done by then: when the next group's sync
// waited for it, it found its data durable already and only then began to
// publish its copies, which is the part of the batch's tail the disk does
// not bound (2000 files of 64 KiB: 13 ms of their 230).
func (b *batchRun) syncGroups() <-chan *group {
	syncing := make(chan *group, len(b.ends)) // in order, each once its sync is started
	go func() {
		defer close(syncing)
		for g := range b.handed {
			g.made = make(chan struct{})
			go func() {
				defer close(g.made)
				g.copies.Wait()
				b.d.groupEvent(groupSyncing, g.index)
				g.copied = time.Now()
				_ = g.b.Sync(b.ctx) // each copy's outcome: g.b.Err
				g.durable = time.Now()
				b.d.groupEvent(groupDurable, g.index)
			}()
			syncing <- g
		}
	}()
	return syncing
}

// recordInOrder records the groups of syncing in order (see recordable);
// the channel is closed once they all are.
func (b *batchRun) recordInOrder(syncing <-chan *group, copiesOver <-chan struct{}) <-chan struct{} {
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for gs := range recordable(syncing, copiesOver) {
			for _, g := range gs {
				b.d.groupEvent(groupRecording, g.index)
			}
			b.d.recordGroups(b.grace, gs, b.results)
			for _, g := range gs {
				b.d.groupEvent(groupRecorded, g.index)
				close(g.synced)
			}
		}
	}()
	return recorded
}

// take returns the next file to copy and its group, or -1 when there is
// none to take: all taken, the batch stopped, or the group open for
// SyncInterval. It opens a group when the last is taken in full, handing
// that one over, once fewer than held groups are left unrecorded.
func (b *batchRun) take() (int, *group) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == len(b.j.subs) || b.ctx.Err() != nil {
		return -1, nil
	}
	var cur *group
	if k := len(b.groups); k > 0 {
		cur = b.groups[k-1]
	}
	switch {
	case cur == nil || b.next == cur.end:
		if cur != nil {
			b.handed <- cur
			b.given++
		}
		if cur = b.openGroup(); cur == nil {
			return -1, nil
		}
	case time.Since(cur.opened) >= b.d.cfg.Flush.SyncInterval:
		return -1, nil
	}
	cur.copies.Add(1)
	b.next++
	return b.next - 1, cur
}

// openGroup opens the next group, once fewer than held groups are left
// unrecorded; nil if the batch is stopped meanwhile. b.mu is held.
func (b *batchRun) openGroup() *group {
	if k := len(b.groups); k >= b.held {
		<-b.groups[k-b.held].synced
		if b.ctx.Err() != nil {
			return nil
		}
	}
	d := b.d
	fb := flush.NewBatch(d.throttle, d.cfg.Flush.SyncEach)
	if len(b.j.subs) == 1 {
		// A file copied alone: resumable, whatever its size.
		fb = flush.NewLoneBatch(d.throttle, d.cfg.Flush.SyncEach)
	}
	g := &group{b: fb, index: len(b.groups), first: b.next,
		end: b.ends[len(b.groups)], opened: time.Now(), synced: make(chan struct{})}
	b.groups = append(b.groups, g)
	d.groupEvent(groupOpened, g.index)
	return g
}

// runStreams runs the batch's streams, each with a Copier of its own,
// until there is no file left to take.
func (b *batchRun) runStreams() {
	d := b.d
	streams := len(d.copiers)
	if d.streams > 0 {
		streams = min(streams, d.streams)
	}
	var wg sync.WaitGroup
	for _, c := range d.copiers[:min(streams, len(b.j.subs))] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, g := b.take(); i >= 0; i, g = b.take() {
				b.copyOne(c, i, g)
			}
		}()
	}
	wg.Wait()
}

// copyOne copies the batch's file i into group g with copier c.
func (b *batchRun) copyOne(c *flush.Copier, i int, g *group) {
	d := b.d
	sub := b.j.subs[i]
	sub.started, sub.batch, sub.copier, sub.grace = time.Now(), g.b, c, b.grace
	if f := sub.file; sub.quiet { // else logged when the batch started
		d.log.Debug("copy", zap.String("src", f.Src), zap.String("dest", f.Dest),
			logging.Bytes("size", f.Size), logging.Bytes("from", f.Written))
	}
	r := result{job: sub}
	r.res, r.warnings, r.err = d.copyFile(b.ctx, sub)
	b.results[i] = r
	g.copies.Done()
}

// handLast hands over the last group opened, if it is not yet, once the
// streams are done, and returns how many files were taken.
func (b *batchRun) handLast() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := len(b.groups); b.given < k {
		last := b.groups[k-1]
		last.end = b.next // fewer when the batch stopped early
		b.handed <- last
	}
	return b.next
}

// groupEvent reports step e of group k of the batch under way to onGroup,
// if set.
func (d *daemon) groupEvent(e groupEvent, k int) {
	if d.onGroup != nil {
		d.onGroup(e, k)
	}
}

// recordable returns the groups of syncing to record, in order, each set in one
// update: a group once its sync is done, with the groups after it whose
// syncs are done too, and, once the copies are over (copiesOver closed),
// with every group left, their syncs awaited. The last groups of a batch
// are made durable together, as the syncfs of one waits for the data of
// the next, and each record rewrites the whole transfer file and fsyncs it
// (8 to 12 ms at 2000 entries): recorded one after the other, the second
// record stood alone at the end of the batch. A group is still recorded
// only once its own sync is done. Recording a group only once the copies
// are over holds no stream back: the streams wait for a group's record
// only to open another group.
func recordable(syncing <-chan *group, copiesOver <-chan struct{}) <-chan []*group {
	out := make(chan []*group)
	over := func() bool {
		select {
		case <-copiesOver:
			return true
		default:
			return false
		}
	}
	go func() {
		defer close(out)
		var carry *group // taken from syncing, but not ready with the set before it
		for {
			g := carry
			carry = nil
			if g == nil {
				var ok bool
				if g, ok = <-syncing; !ok {
					return
				}
			}
			<-g.made
			gs := []*group{g}
			for carry == nil {
				var next *group
				ok := true
				if over() {
					next, ok = <-syncing // the rest are handed, or about to be
				} else {
					select {
					case next, ok = <-syncing:
					default:
						ok = false
					}
				}
				if !ok {
					break
				}
				select {
				case <-next.made:
					gs = append(gs, next)
				default:
					if over() {
						<-next.made
						gs = append(gs, next)
					} else {
						carry = next
					}
				}
			}
			out <- gs
		}
	}()
	return out
}

// logGroups logs, at debug, the record of groups gs, failed with err if
// not nil.
func (d *daemon) logGroups(gs []*group, err error) {
	for _, g := range gs {
		fields := []zap.Field{zap.Int("group", g.index), zap.Int("files", g.end-g.first),
			zap.Duration("copy", g.copied.Sub(g.opened)), zap.Duration("sync", g.durable.Sub(g.copied)),
			zap.Duration("record", time.Since(g.durable))}
		if err != nil {
			// The copies stay published; the next attempt records them
			// without copying them again (unrecorded.go).
			d.log.Debug("batch published but not recorded", append(fields, zap.Error(err))...)
			continue
		}
		d.log.Debug("batch recorded", fields...)
	}
}

// recordGroups records the copies of the groups gs, each made durable and
// published all at once by its Batch's Sync, in one update, and sets their
// outcomes in results, the batch's, indexed as its subs. The update waits
// for the lock under grace, the batch's grace context: the copies are
// published, and recorded even when the batch is being stopped.
func (d *daemon) recordGroups(grace context.Context, gs []*group, results []result) {
	done := completed(gs, results)
	if len(done) == 0 {
		return
	}
	ps := make([]progress, len(done))
	for i, r := range done {
		ps[i] = progress{job: r.job, n: r.job.file.Size, crc: r.res.CRC, warnings: r.warnings}
	}
	err := d.recordProgress(grace, ps)
	d.logGroups(gs, err)
	for i, r := range done {
		switch f := r.job.file; {
		case ps[i].refused:
			r.res.Complete, r.err = false, errEntryChanged
		case err != nil:
			r.job.unrecorded = noteUnrecorded(f, r.res.CRC, r.warnings)
			r.res.Complete, r.err = false, fmt.Errorf("recording WRITTEN %d: %w", f.Size, err)
		}
	}
}

// completed sets the outcome of each copy of the groups gs that its
// group's Batch held (Batch.Err) in results, and returns the results of
// the copies complete and to be recorded: those published by their Batch,
// and those whose earlier copy only needed its record (recordOnly).
func completed(gs []*group, results []result) []*result {
	var done []*result
	for _, g := range gs {
		for i := g.first; i < g.end; i++ {
			r := &results[i]
			if r.err == nil && r.res.Held {
				r.res.Held = false
				if err := g.b.Err(r.job.file.Dest); err != nil {
					r.err = err
				} else {
					r.res.Complete, r.res.Written = true, r.job.file.Size
				}
			}
			if r.err == nil && r.res.Complete {
				done = append(done, r)
			}
		}
	}
	return done
}

// storeDurable sets j's durable to n, and its batch's by as much.
func (j *job) storeDurable(n int64) {
	if prev := j.durable.Swap(n); j.parent != nil {
		j.parent.durable.Add(n - prev)
	}
}

// progress is one file's progress to record: WRITTEN n, and with n = SIZE
// its completion (the CRC of its bytes and its checkpoint's warnings).
// recordProgress sets prev, the WRITTEN its copy had recorded before, and
// refused.
type progress struct {
	job      *job
	n        int64
	crc      uint32
	warnings string

	prev    int64
	refused bool // the entry holds a WRITTEN the library set: its value wins
}

// recordProgress records the progress ps, a file's commit of progress or
// the completions of a batch's groups, in one locked update of the
// transfer file: the one record stage of every copy. Each changes its
// entry only while the entry holds what its copy last recorded (the
// library's value wins: refused is set instead), and stores n as its job's
// durable under the lock, so that the loop, comparing the entries with
// durable under the same lock, never takes a commit for a change made by
// the library. A completion sets WRITTEN = SIZE, the CRC and the end of
// any ERROR in one update, so that no crash can leave a complete file
// without its CRC. When the update fails nothing is recorded, and durable
// goes back to what it was.
func (d *daemon) recordProgress(ctx context.Context, ps []progress) error {
	stored := make([]bool, len(ps)) // durable set under the lock
	_, wrote, err := d.store.UpdateContext(ctx, func(t *hashfile.Tree) error {
		for i := range ps {
			p := &ps[i]
			f := p.job.file
			p.prev = p.job.durable.Load()
			ok := false
			if p.n == f.Size {
				ok = transfer.SetComplete(t, f, p.prev, p.crc, p.warnings)
			} else {
				ok = transfer.SetWrittenFrom(t, f, p.prev, p.n)
			}
			if p.refused = !ok; ok {
				p.job.storeDurable(p.n)
				stored[i] = true
			}
		}
		return nil
	})
	if err != nil {
		for i, p := range ps {
			if stored[i] {
				p.job.storeDurable(p.prev)
			}
		}
		return err
	}
	d.beat.workerBeat()
	if wrote {
		d.wroteOK.Store(true)
	}
	for _, p := range ps {
		if !p.refused && p.n > p.prev {
			d.copied.Add(p.n - p.prev)
		}
	}
	return nil
}
