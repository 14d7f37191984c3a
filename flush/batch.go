package flush

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush/autobw"
	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// Batch is the durable-and-publish stage of every copy, and lets several
// copies share its cost. A copy copies and checks its data, then hands the
// open partial copy to its Job's Batch (a lone Copy makes a batch of one,
// NewLoneBatch) instead of fsyncing it, publishing it and calling commit:
// its Result has Held set. Sync then makes the data of every held copy
// durable at once, publishes each under its final name (after the checks:
// the source unchanged, the partial copy still ours and still where
// DESTINATION leads), makes the
// new names durable, and reports each copy's outcome through Err. A copy
// from 0 has no name until then (an unnamed file, see createAnon). Only a copy
// whose Err is nil after Sync is durable under its name; the caller then
// records them all in one update of the transfer file.
//
// Durable at once: one syncfs(2) per file system where syncfs reports
// write-back errors and is known to cover file data and metadata (Linux
// 5.8 or later, on ext4, XFS, btrfs, F2FS and tmpfs), else an fsync of
// each file. A copy of a 1 KiB file then costs no journal commit of its
// own, which is what the per-file fsync of a file alone costs; the bytes
// are durable before they are published and published before they are
// recorded. A batch of one is fsynced on its own. Options.SyncEach
// selects the per-file fsync everywhere.
//
// A Batch may be shared by copies running concurrently; Sync is called
// once, after they have all returned.
type Batch struct {
	t        *Throttle
	syncEach bool
	// named makes every partial copy named, as on a file system without
	// O_TMPFILE (Lustre, GPFS and NFS among them), so that the tests
	// run that path on any file system.
	named bool
	// lone: the Batch is a lone Copy's, of one copy, whose partial copy
	// is named and resumable whatever its size (see run.resumable).
	lone bool

	mu      sync.Mutex
	dirs    []*batchDir
	parents []string // directories whose entries changed when dirs were created
	held    []*run
	noAnon  map[int]bool     // directories where partial copies must be named (see createAnon)
	proc    bool             // /proc/self/fd was seen to name an unnamed file (see createAnon)
	errs    map[string]error // outcome of each held copy, by destination, after Sync
}

type batchDir struct {
	fd      int
	dev     uint64
	ino     uint64
	root    string   // as asked for
	name    string   // the path, as asked for
	parents []string // directories whose entries changed when it was created
}

// maxBatchable is the largest file BatchMax lets a batch take: where the
// fixed cost of a file (opens, fsyncs, the record) dominates its copy.
const maxBatchable = 4 << 20

// BatchMax returns the largest file that a copier made with o copies as a
// file of a batch rather than alone: a larger one is copied to a named
// partial copy whose progress is committed as it goes (every SyncBytes or
// SyncInterval) and resumed after an interruption; a smaller one is
// written to an unnamed file where it can, and made durable with the
// other files of its Batch.
func BatchMax(o Options) int64 {
	o = o.WithDefaults()
	return min(maxBatchable, o.SyncBytes/4)
}

// NewBatch returns an empty Batch whose Sync is paced by t (nil: no
// limits), so that its work counts under PERCENT like the copies'; with
// syncEach every held copy is fsynced on its own.
func NewBatch(t *Throttle, syncEach bool) *Batch {
	return &Batch{t: t, syncEach: syncEach}
}

// NewLoneBatch returns a Batch for a file copied alone, as NewBatch does,
// except that its copy goes to a named partial copy whose progress is
// committed as it goes (every SyncBytes or SyncInterval) and resumed after
// an interruption, whatever its size. Copy makes one for a Job without a
// Batch.
func NewLoneBatch(t *Throttle, syncEach bool) *Batch {
	return &Batch{t: t, syncEach: syncEach, lone: true}
}

// openDir returns the Batch's descriptor of the destination directory
// dir (beneath root, if set), opening and creating it (openDir) the first
// time it is asked for. The descriptor stays the Batch's. The checks at
// publishing (Sync) look the names up afresh, so a directory moved after
// it was opened is seen then.
func (b *Batch) openDir(dir, root, who string) (*batchDir, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.dirs {
		if d.name == dir && d.root == root {
			return d, nil
		}
	}
	fd, parents, err := openDir(dir, root, who)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, osErr(who, "cannot stat directory "+dir, err)
	}
	d := &batchDir{fd: fd, dev: st.Dev, ino: st.Ino, root: root, name: dir, parents: parents}
	b.dirs = append(b.dirs, d)
	b.parents = append(b.parents, parents...)
	return d, nil
}

// hold takes over a completed copy, whose source r has closed: the Batch
// keeps a copy of r's state, and r's partial copy and directory are the
// Batch's now.
func (b *Batch) hold(r *run) {
	b.mu.Lock()
	h := new(run)
	*h = *r
	h.src, h.seg.fd, h.whole = -1, -1, nil
	b.held = append(b.held, h)
	b.mu.Unlock()
}

// release closes the directories of a Batch that holds no copy, in place
// of its Sync.
func (b *Batch) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.dirs {
		_ = unix.Close(d.fd)
	}
	b.dirs, b.parents = nil, nil
}

// Held returns the number of copies waiting for Sync.
func (b *Batch) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// Dirs returns the number of directories the Batch holds.
func (b *Batch) Dirs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dirs)
}

// Err returns the outcome of the held copy to dst after Sync: nil when it
// is durable under its name. A destination the Batch never held is an
// error too.
func (b *Batch) Err(dst string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err, ok := b.errs[filepath.Clean(dst)]
	if !ok {
		return fmt.Errorf("destination %s: %w", dst, errNotHeld)
	}
	return err
}

var errNotHeld = errors.New("not completed in this batch")

// Sync makes the held copies durable and publishes them, then releases
// everything the Batch holds; Err tells each copy's outcome. It returns
// nil if every held copy is durable under its name, else the error of the
// copy whose DESTINATION sorts first, so that the same outcome gives the
// same error whatever order the copies were held in.
//
// The data first, then the names: a name never leads to bytes that are
// not durable. The lookups each copy needs are made while Sync waits for
// the disk: the sources (still the files copied?) while the data is
// written, DESTINATION (leading to the file placed?) while the names are.
// Each is made after the copy and before the copy is recorded, where the
// promise needs it; at 2000 files of 64 KiB they are 4000 path lookups,
// which otherwise stood between the last copy and its record.
//
// When ctx ends (the flush is stopped), Sync returns at once: the fsync or
// syncfs under way goes on in a goroutine of its own, which then closes
// the copies, and its outcome is not used. A copy whose data was not made
// durable before ctx ended is not published, and one whose name was not
// made durable is not reported durable: each fails with ctx's error,
// leaving WRITTEN where its last commit put it. On a stalled destination
// an fsync can last minutes, while the library waits for STOPPED.
func (b *Batch) Sync(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	// One copy is fsynced on its own: a syncfs would write whatever else
	// the file system holds unsynced, for no file shared.
	s := &heldSet{t: b.t, syncEach: b.syncEach || len(b.held) == 1, held: b.held, dirs: b.dirs, parents: b.parents}
	b.dirs, b.held, b.parents = nil, nil, nil
	w := b.t.Begin()
	defer w.End()
	errs := s.publish(ctx)
	b.errs = make(map[string]error, len(s.held))
	for i, r := range s.held {
		if _, ok := b.errs[r.dst]; !ok || errs[i] != nil {
			b.errs[r.dst] = errs[i]
		}
	}
	return firstErr(b.errs)
}

// firstErr returns the error of errs whose destination sorts first, nil
// if there is none.
func firstErr(errs map[string]error) error {
	var first string
	var err error
	for dst, e := range errs {
		if e != nil && (err == nil || dst < first) {
			first, err = dst, e
		}
	}
	return err
}

// heldSet is what one Sync makes durable and publishes: the copies a
// Batch held and the directories it opened, taken from the Batch so that
// a sync abandoned when its context ends can finish with them on its own.
type heldSet struct {
	t        *Throttle
	syncEach bool
	held     []*run
	dirs     []*batchDir
	parents  []string // directories whose entries changed when dirs were created
}

// publish makes the held copies durable, publishes them and makes their
// names durable, and returns each copy's outcome, in the order of held.
func (s *heldSet) publish(ctx context.Context) []error {
	errs := make([]error, len(s.held))
	mode, ok := s.makeDurable(ctx, errs)
	if !ok {
		for i, r := range s.held {
			errs[i] = fmt.Errorf("%s: %w: stopped before the copy was durable; nothing was published", r.dstName(), ctx.Err())
		}
		return errs
	}
	s.each(func(i int, r *run) {
		if errs[i] == nil {
			r.dropCache()
			errs[i] = r.place()
		}
	})
	var names error
	synced := background(func() { names = s.syncNames(mode) })
	s.each(func(i int, r *run) {
		if errs[i] == nil { // placed under its name
			errs[i] = r.checkPlaced()
		}
		r.dir = -1 // the Batch's, closed once the names are durable
		if cerr := r.closeFiles(); cerr != nil && errs[i] == nil {
			errs[i] = cerr
		}
	})
	// Once published, the names' sync is waited for a little beyond STOP:
	// a copy published but not recorded is copied again from 0 (its
	// partial copy is gone), WRITTEN going back, for want of a fsync of
	// its directory that takes milliseconds unless the destination stalls.
	durable := finished(ctx, synced)
	if !durable {
		grace, cancel := stopGrace(ctx)
		durable = finished(grace, synced)
		cancel()
	}
	if !durable {
		go func() {
			<-synced
			s.closeDirs()
		}()
		names = fmt.Errorf("%w: stopped before the published names were durable; not recorded", ctx.Err())
	} else {
		s.closeDirs()
	}
	for i := range errs {
		if errs[i] == nil && names != nil {
			errs[i] = fmt.Errorf("%s: %w", s.held[i].dstName(), names)
		}
	}
	return errs
}

// makeDurable makes the data of the held copies durable (syncData),
// checking their sources meanwhile, and sets in errs the copies that
// failed either. It reports false, having set nothing, when ctx ends
// first (or had ended): the sync then goes on in the background, which
// releases the copies once it returns (see abandon).
func (s *heldSet) makeDurable(ctx context.Context, errs []error) (syncMode, bool) {
	if ctx.Err() != nil {
		s.abandon()
		return syncMode{}, false
	}
	var mode syncMode
	var err error
	checked := make([]error, len(s.held)) // each source's check, then fsync's failure
	done := background(func() {
		mode, err = s.syncData(func() {
			s.each(func(i int, r *run) { checked[i] = r.checkSource() })
		}, checked)
	})
	if !finished(ctx, done) || ctx.Err() != nil {
		named := s.noteAbandoned()
		go func() {
			<-done
			s.abandon()
			for _, k := range named {
				s.t.syncReturned(k)
			}
		}()
		return syncMode{}, false
	}
	for i, r := range s.held {
		switch {
		case checked[i] != nil:
			errs[i] = checked[i]
		case err != nil:
			errs[i] = osErr(r.dstName(), "cannot make partial copy "+r.tmpPath+" durable", err)
		case mode.failed[r] != nil:
			errs[i] = osErr(r.dstName(), "cannot fsync partial copy "+r.tmpPath, mode.failed[r])
		}
	}
	return mode, true
}

// finished waits for done and reports true, or false if ctx ends first.
// A done already closed wins over an ended ctx.
func finished(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// noteAbandoned notes the held copies that have a name as locked by an
// abandoned fsync (see Throttle.syncInFlight) until abandon has released
// them, and returns their keys.
func (s *heldSet) noteAbandoned() []fileKey {
	var keys []fileKey
	for _, r := range s.held {
		if !r.anon {
			k := fileKey{dev: uint64(r.tmpStat.Dev), ino: r.tmpStat.Ino}
			s.t.syncAbandoned(k)
			keys = append(keys, k)
		}
	}
	return keys
}

// abandon releases the held copies of a sync abandoned before anything was
// published: an unnamed copy goes with its descriptor, a named one that
// holds no committed progress is removed (it would be reclaimed by the
// next copy anyway, and no later copy may come), one that does is kept
// for the next copy to resume from its last commit.
func (s *heldSet) abandon() {
	for _, r := range s.held {
		if !r.anon && r.res.Written == 0 {
			_ = r.discardTemp() // through the Batch's directory, still open
		}
		r.dir = -1 // the Batch's, closed below
		_ = r.closeFiles()
	}
	s.closeDirs()
}

// closeDirs closes the directories the Batch opened.
func (s *heldSet) closeDirs() {
	for _, d := range s.dirs {
		_ = unix.Close(d.fd)
	}
}

// background runs f in a goroutine of its own; the channel is closed once
// it has returned.
func background(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// maxPublishers bounds the goroutines among which a Batch shares the work
// on each of its copies.
const maxPublishers = 4

// each calls f on every held copy, with its index in held. The calls are
// shared among a few goroutines, up to the CPUs the process may use: each
// is a few lookups or a link waiting on the file system, and thousands of
// them one after the other would add up while the batch's last group is
// all that is left to do.
func (s *heldSet) each(f func(i int, r *run)) {
	var next atomic.Int64
	work := func() {
		for i := int(next.Add(1) - 1); i < len(s.held); i = int(next.Add(1) - 1) {
			f(i, s.held[i])
		}
	}
	var wg sync.WaitGroup
	for range min(maxPublishers, runtime.GOMAXPROCS(0), len(s.held)) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

// syncMode is how Sync made the held copies' data durable.
type syncMode struct {
	syncfs map[uint64]int // file systems synced whole: device → a descriptor on it
	failed map[*run]error // copies whose own fsync failed
}

// syncData makes the data of every held copy durable: syncfs once per
// file system where it can be trusted, an fsync of each file elsewhere. An
// error of syncfs concerns every copy on that file system and is returned.
// beside runs while the syncfs calls wait for the disk; a copy it failed
// (errs) is not fsynced.
//
// The syncfs goes through the Batch's first directory on that file
// system, opened before any of its copies there was created. syncfs(2)
// reports the write-back errors raised since its descriptor's open file
// last synced (or was opened), and only once per open file: one of the
// copies' partial copies would not do, as an error raised before it was
// opened, or reported through it already (a Writeback's syncfs, through a
// duplicate of it, for one), would not be reported again, and a copy whose
// data never reached the disk would be published.
func (s *heldSet) syncData(beside func(), errs []error) (syncMode, error) {
	m := syncMode{syncfs: map[uint64]int{}, failed: map[*run]error{}}
	if !s.syncEach && syncfsReportsErrors() {
		for _, d := range s.dirs { // in the order they were opened
			if _, ok := m.syncfs[d.dev]; !ok && syncfsCovers(d.fd) {
				m.syncfs[d.dev] = d.fd
			}
		}
	}
	done := background(beside)
	var err error
	for _, fd := range m.syncfs {
		if err = eintr.Do(func() error { return unix.Syncfs(fd) }); err != nil {
			break
		}
	}
	<-done
	if err != nil {
		return m, err
	}
	for i, r := range s.held {
		if _, ok := m.syncfs[r.tmpStat.Dev]; ok || errs[i] != nil {
			continue
		}
		began := s.t.clock()
		if err := fsync(r.tmp); err != nil {
			m.failed[r] = err
			continue
		}
		s.t.observe(began, autobw.Commit, r.unsynced)
	}
	return m, nil
}

// syncNames makes the renames and the directories the copies created
// durable: syncfs again where the data was synced that way, an fsync of
// each directory once elsewhere.
func (s *heldSet) syncNames(m syncMode) error {
	for _, fd := range m.syncfs {
		if err := eintr.Do(func() error { return unix.Syncfs(fd) }); err != nil {
			return fmt.Errorf("cannot make the published names durable: %w", err)
		}
	}
	for _, d := range s.parents {
		if syncedWhole(m, d) {
			continue
		}
		if err := fsyncDir(d); err != nil {
			return fmt.Errorf("cannot fsync directory %s: %w", d, err)
		}
	}
	for _, d := range s.dirs {
		if _, ok := m.syncfs[d.dev]; ok {
			continue
		}
		if err := fsync(d.fd); err != nil {
			return fmt.Errorf("cannot fsync directory %s: %w", d.name, err)
		}
	}
	return nil
}

// syncedWhole tells whether directory dir lies on a file system Sync
// synced whole.
func syncedWhole(m syncMode, dir string) bool {
	if len(m.syncfs) == 0 {
		return false
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false
	}
	_, ok := m.syncfs[st.Dev]
	return ok
}

// syncfsReportsErrors tells whether this kernel's syncfs(2) returns the
// write-back errors of the file system (Linux 5.8 and later); before, it
// returned 0 whatever happened, so it cannot stand in for fsync.
func syncfsReportsErrors() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 8)
}

// kernelAtLeast tells whether the release string (as uname -r prints it)
// is at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	digits := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(parts[1])
	}
	mi, err2 := strconv.Atoi(parts[1][:digits])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// syncfsCovers tells whether fd lies on a local file system whose syncfs
// writes back every dirty page and commits the metadata (the journal or
// log) of the whole file system: ext2/3/4, XFS, btrfs, F2FS, tmpfs.
// Network and cluster file systems (NFS, Lustre, GPFS, FUSE) get an fsync
// per file: their syncfs is not known to give that guarantee everywhere.
func syncfsCovers(fd int) bool {
	var s unix.Statfs_t
	if err := unix.Fstatfs(fd, &s); err != nil {
		return false
	}
	switch int64(s.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC, unix.TMPFS_MAGIC:
		return true
	}
	return false
}
