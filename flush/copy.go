package flush

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush/autobw"
	"github.com/scr-transferd/scr-transferd/internal/eintr"
)

// Defaults and bounds for Options.
const (
	DefaultBufSize      = 1 << 20         // Options.BufSize when unset (SCR_FILE_BUF_SIZE's default)
	MaxBufSize          = 64 << 20        // larger Options.BufSize values are reduced to this
	MinBufSize          = 4 << 10         // smaller positive Options.BufSize values are raised to this
	DefaultSyncBytes    = 64 << 20        // Options.SyncBytes when unset
	DefaultSyncInterval = 2 * time.Second // Options.SyncInterval when unset
	DropCacheMin        = 1 << 20         // smallest file whose pages Options.DropCache drops
)

const (
	// kickBytes: the write-back of a copy is started every kickBytes
	// written, so that the disk writes while the copy goes on instead of
	// all at the next fsync (see BenchmarkTrickKickBytes).
	kickBytes = 8 << 20
	// kickHeld: a copy of this many bytes or more handed to a Batch has
	// its write-back started at once, so that the disk writes it while the
	// streams copy the next files instead of all at the Batch's sync (see
	// BenchmarkTrickKickHeld).
	kickHeld = 1 << 20
	// tempSuffix ends the name of a partial copy.
	tempSuffix = PartialSuffix
	// nameMax is the longest file name Linux file systems accept.
	nameMax = 255
)

// PartialSuffix ends the name of every partial copy (see TempPath).
const PartialSuffix = ".scrpart"

// IsPartialName tells whether the final component of path has the form of
// a partial copy's name: hidden, ending in PartialSuffix.
func IsPartialName(path string) bool {
	b := filepath.Base(path)
	return strings.HasPrefix(b, ".") && strings.HasSuffix(b, PartialSuffix)
}

// Options tune a Copier. Zero values select the defaults.
type Options struct {
	// BufSize is the number of bytes read and written at once (default
	// DefaultBufSize, bounded to [MinBufSize, MaxBufSize]). Under a bandwidth
	// limit chunks shrink to about 1/64 s of transfer.
	BufSize int
	// SyncBytes: the partial copy is fsynced and the progress committed after
	// this many bytes were copied (default DefaultSyncBytes) ...
	SyncBytes int64
	// SyncInterval: ... or after this long, whichever comes first (default
	// DefaultSyncInterval).
	SyncInterval time.Duration
	// DropCache asks the kernel (posix_fadvise DONTNEED) to drop the source
	// and destination pages of each range once it is durable, for files of
	// DropCacheMin bytes or more. Each call drains the page lists of every
	// CPU, which costs more than the pages of a small file are worth: those
	// are left to the kernel's reclaim, like any clean page.
	DropCache bool
	// VerifyAfter re-reads the durable partial copy before publishing it and
	// compares its CRC32 with the CRC32 of the data read from the source.
	// On a resume the source prefix is read again for that purpose. On a
	// mismatch the partial copy is removed, so the next Copy starts over.
	//
	// Reads that only compute a CRC (this check, and the prefix of a resumed
	// copy) are paced by PERCENT but not counted against the bandwidth
	// limit, which applies to bytes copied.
	VerifyAfter bool
	// SyncEach makes a Batch fsync each of its files, as a lone copy does,
	// instead of one syncfs per local file system (see Batch).
	SyncEach bool
	// Owner names who the partial copies are written for: the daemon sets
	// the host and the transfer file it serves. A digest of it is kept in
	// each partial copy's record, and a partial copy of another owner is
	// never written, emptied, resumed or removed (ErrPartialForeign).
	Owner string

	// noKick turns the sync_file_range write-back kicks off, so that a
	// benchmark can weigh them.
	noKick bool
}

// Job is one file to copy, as the transfer file describes it.
type Job struct {
	Src     string // file in the cache (FILES/<src>)
	Dst     string // its DESTINATION on the parallel file system
	Size    int64  // SIZE from the transfer file
	Written int64  // WRITTEN from the transfer file: the offset to resume from
	// SrcRoot and DstRoot, when set, confine the copy: Src and Dst must lie
	// beneath them, and the kernel resolves every path below them
	// (openat2(2) with RESOLVE_BENEATH), so that neither ".." nor a
	// symbolic link swapped in during the copy leads outside.
	SrcRoot, DstRoot string
	// Ranges lists the spans of the source that hold data (in any order,
	// possibly overlapping); everything else is copied as a hole and counts
	// as zeros. Nil means the whole file, with holes found by
	// SEEK_DATA/SEEK_HOLE; an empty non-nil slice means the file is all hole.
	Ranges []Range
	// Batch, when set, defers the end of a completed copy: the copy is
	// checked and handed to the Batch (Result.Held), whose Sync makes it
	// durable and publishes it; commit is not called with Size, the
	// caller records the completion once Batch.Err says it is durable.
	// Without one, Copy makes a batch of one (NewLoneBatch) and syncs it
	// itself: every copy is published by Batch.Sync.
	Batch *Batch
	// Verify, when set, checks the source's content on the descriptor the
	// copy opened, as the bytes are copied; the copy is published only on
	// its sound verdict. Ranges it returns replace the job's. On a resume
	// the source's prefix is read again to show it every byte.
	Verify Verifier
}

// Result reports how far a copy got. It is meaningful even when Copy returns
// an error.
type Result struct {
	// Written is the durable offset reached: every byte before it is fsynced
	// in the partial copy (or in the published file), so a later Copy with
	// Job.Written set to it resumes there. It equals Size when Complete, and
	// is 0 when the partial copy had to be discarded (source changed,
	// verification failed).
	Written int64
	// CRC is the IEEE CRC32 of bytes [0,Size), holes counting as zeros; valid
	// when Complete.
	CRC uint32
	// Complete is set once the destination is durable under its final name.
	Complete bool
	// Held is set instead when the copy is complete and checked but was
	// handed to Job.Batch, which makes it durable and publishes it: it is
	// complete once Batch.Sync is done and Batch.Err is nil. CRC is valid.
	Held bool
	// Restarted, when not empty, says why the job's WRITTEN could not be
	// resumed and the copy started again from offset 0.
	Restarted string
}

// Copier copies files; it owns the buffers and timer reused by every copy.
// A Copier is used by one goroutine at a time.
type Copier struct {
	t      *Throttle
	o      Options
	owner  string // ownerDigest(o.Owner)
	mode   uint32 // the mode a published copy gets: 0666 less the umask
	buf    []byte
	timer  *time.Timer
	work   Work    // the throttle's account of the copy under way
	ranges []Range // scratch for a Job's normalized Ranges
	// procLink is set once linking a descriptor (AT_EMPTY_PATH) was
	// refused: unnamed partial copies are then linked through /proc.
	procLink atomic.Bool
}

// NewCopier returns a Copier throttled by t (nil: no limits) and tuned by o.
func NewCopier(t *Throttle, o Options) *Copier {
	o = o.WithDefaults()
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	return &Copier{t: t, o: o, owner: ownerDigest(o.Owner), mode: 0o666 &^ processUmask(),
		buf: make([]byte, o.BufSize), timer: tm}
}

// WithDefaults returns o with each unset field set to its default and
// BufSize brought within [MinBufSize, MaxBufSize]: the options a Copier
// made from o works with, for callers that size their own work by them.
func (o Options) WithDefaults() Options {
	switch {
	case o.BufSize <= 0:
		o.BufSize = DefaultBufSize
	case o.BufSize < MinBufSize:
		o.BufSize = MinBufSize
	case o.BufSize > MaxBufSize:
		o.BufSize = MaxBufSize
	}
	if o.SyncBytes <= 0 {
		o.SyncBytes = DefaultSyncBytes
	}
	if o.SyncInterval <= 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	return o
}

// TempPath returns where the partial copy of dst lives: a hidden file in the
// same directory, ".<base>.scrpart" (with the base shortened and a hash of
// it added when the name would exceed 255 bytes).
func TempPath(dst string) string {
	dst = filepath.Clean(dst)
	base := filepath.Base(dst)
	name := "." + base + tempSuffix
	if len(name) > nameMax {
		keep := nameMax - len(".") - len(".01234567") - len(tempSuffix)
		name = fmt.Sprintf(".%s.%08x%s", base[:keep], crc32.ChecksumIEEE([]byte(base)), tempSuffix)
	}
	return filepath.Join(filepath.Dir(dst), name)
}

// Copy copies job.Src to job.Dst, resuming at job.Written when the partial
// copy left by an earlier Copy allows it, and restarting from 0 (saying why
// in Result.Restarted, and committing 0) when it does not.
//
// The data goes to TempPath(job.Dst), in batches of Options.SyncBytes or
// Options.SyncInterval; after each batch is fsynced Copy calls
// commit(offset, crc) with an offset < job.Size and the CRC32 of bytes
// [0,offset), holes counting as zeros. Once everything is copied, the
// partial copy is extended to Size, optionally verified, and handed to
// job.Batch (see Job.Batch); without one, to a batch of one whose Sync
// fsyncs it, renames it to job.Dst and fsyncs the directory; only then is
// commit(job.Size) called. A failing commit stops the copy and its error
// is returned wrapped.
//
// When ctx ends, Copy fsyncs and commits what it has copied, if it can
// within a second, and returns an error wrapping ctx.Err(); a final fsync
// under way is abandoned and nothing is published. commit may be nil.
func (c *Copier) Copy(ctx context.Context, job Job, commit func(written int64, crc uint32) error) (Result, error) {
	if commit == nil {
		commit = func(int64, uint32) error { return nil }
	}
	if job.Batch != nil {
		return c.copyStage(ctx, job, commit)
	}
	// A lone copy is a batch of one: the same stages, its Batch made here.
	job.Batch = NewLoneBatch(c.t, c.o.SyncEach)
	res, err := c.copyStage(ctx, job, commit)
	if !res.Held { // failed or interrupted: nothing to publish
		job.Batch.release()
		return res, err
	}
	return c.publishLone(ctx, job, res, commit)
}

// copyStage runs the copy stage of job: the data copied into a checked
// partial copy, which is handed to job.Batch once complete.
func (c *Copier) copyStage(ctx context.Context, job Job, commit func(int64, uint32) error) (Result, error) {
	r := run{c: c, ctx: ctx, job: job, commit: commit, src: -1, tmp: -1, dir: -1}
	if c.t != nil {
		c.t.begin(&c.work, c.timer)
		defer c.work.End()
		r.w = &c.work
	}
	err := r.do()
	if cerr := r.closeFiles(); err == nil {
		err = cerr
	}
	return r.res, err
}

// publishLone makes the lone copy held by job.Batch durable and publishes
// it (Batch.Sync), then commits Size.
func (c *Copier) publishLone(ctx context.Context, job Job, res Result, commit func(int64, uint32) error) (Result, error) {
	_ = job.Batch.Sync(ctx)
	res.Held = false
	if err := job.Batch.Err(job.Dst); err != nil {
		return res, err
	}
	res.Written, res.Complete = job.Size, true
	if c.t != nil {
		// The record and the pause after it count under PERCENT, as the
		// copy's work does (Batch.Sync counts its own).
		c.t.begin(&c.work, c.timer)
		defer c.work.End()
	}
	if err := commit(job.Size, res.CRC); err != nil {
		return res, fmt.Errorf("source %s: recording the completed copy: %w", job.Src, err)
	}
	if c.t != nil {
		if err := c.work.Pace(ctx); err != nil && ctx.Err() == nil {
			return res, err
		}
	}
	return res, nil
}

// run is the state of one Copy.
type run struct {
	c      *Copier
	ctx    context.Context
	job    Job
	commit func(int64, uint32) error
	res    Result
	w      *Work // nil when unthrottled

	dst, tmpPath  string
	base, tmpName string // final components of dst and tmpPath, in dir
	src, tmp, dir int    // file descriptors (dir: dst's directory), -1 when closed
	srcStat       unix.Stat_t
	srcFile       *os.File    // a duplicate of src handed to job.Verify, nil if none
	check         Check       // job.Verify's check of this copy, nil if none
	srcID         identity    // the source as opened: checked at every commit and before publishing
	srcPlace      place       // the source's path, looked up afresh at each check
	tmpPlace      place       // the partial copy's path, likewise
	dstPlace      place       // DESTINATION, looked up once published
	tmpStat       unix.Stat_t // the partial copy as opened, to tell it from a file put in its place
	seg           segmenter   // over the source
	whole         []byte      // the source's bytes when readWhole read it whole, else nil

	pos      int64 // data before pos is written to the partial copy
	crc      uint32
	crcPos   int64 // crc covers [0,crcPos)
	tempSize int64 // size of the partial copy
	unsynced int64 // bytes written since the last fsync
	lastSync time.Time
	kicked   int64 // writeback started up to here
	dropped  int64 // page cache dropped up to here

	// bdir is dir as its Batch opened it: its descriptor is the Batch's,
	// not closed with the copy; nil until openTemp opened it.
	bdir          *batchDir
	dirPlace      place // DESTINATION's directory, looked up afresh before an unnamed copy is linked
	anon          bool  // the partial copy has no name yet (see createAnon)
	linked        bool  // the unnamed copy was linked at DESTINATION, replacing nothing
	recorded      bool  // rec is kept on the partial copy (see partialRecord)
	rec           partialRecord
	dirsPending   bool     // directory entries not yet fsynced
	newDirParents []string // parents of directories this copy created
}

// srcName and dstName name the source and DESTINATION in messages, made
// only when one is written.
func (r *run) srcName() string { return "source " + r.job.Src }
func (r *run) dstName() string { return "destination " + r.job.Dst }

func (r *run) do() error {
	job := &r.job
	if job.Src == "" || job.Dst == "" {
		return fmt.Errorf("%w: source %q or destination %q is empty", ErrInvalidJob, job.Src, job.Dst)
	}
	if job.Size < 0 {
		return fmt.Errorf("%s: %w: SIZE %d is negative", r.srcName(), ErrInvalidJob, job.Size)
	}
	r.dst = filepath.Clean(job.Dst)
	r.tmpPath = TempPath(r.dst)
	r.base, r.tmpName = filepath.Base(r.dst), filepath.Base(r.tmpPath)
	if b := filepath.Base(r.dst); b == "/" || b == "." || b == ".." {
		return fmt.Errorf("%s: %w: not a file name", r.dstName(), ErrInvalidJob)
	}
	if s := filepath.Clean(job.Src); s == r.dst || s == r.tmpPath {
		return fmt.Errorf("%s: %w: the destination is the source itself", r.dstName(), ErrInvalidJob)
	}
	if err := r.newPlaces(); err != nil {
		return err
	}
	if job.Ranges != nil {
		rs, err := normalizeRanges(r.c.ranges, job.Ranges, job.Size)
		r.c.ranges = rs[:0]
		if err != nil {
			return fmt.Errorf("%s: %w", r.srcName(), err)
		}
		r.seg.explicit, r.seg.ranges = true, rs
	}
	if err := r.ctx.Err(); err != nil {
		return r.interrupted(err, nil)
	}
	if err := r.openSource(); err != nil {
		return err
	}
	if err := r.readWhole(); err != nil {
		return r.interrupted(err, nil)
	}
	if err := r.startCheck(); err != nil {
		return r.interrupted(err, nil)
	}
	if err := r.openTemp(); err != nil {
		return r.interrupted(err, nil)
	}
	if err := r.copyData(); err != nil {
		if r.isCtxErr(err) {
			return r.interrupted(err, r.saveProgress())
		}
		return err
	}
	return r.interrupted(r.finish(), nil)
}

// isCtxErr tells whether err is the end of the run's context.
func (r *run) isCtxErr(err error) bool {
	cerr := r.ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// newPlaces prepares the lookups of the source, the partial copy,
// DESTINATION and DESTINATION's directory.
func (r *run) newPlaces() error {
	job := &r.job
	var err error
	if r.srcPlace, err = newPlace(job.Src, job.SrcRoot); err != nil {
		return fmt.Errorf("%s: %w", r.srcName(), err)
	}
	if r.tmpPlace, err = newPlace(r.tmpPath, job.DstRoot); err != nil {
		return fmt.Errorf("%s: %w", r.dstName(), err)
	}
	if r.dstPlace, err = newPlace(r.dst, job.DstRoot); err != nil {
		return fmt.Errorf("%s: %w", r.dstName(), err)
	}
	if r.dirPlace, err = newPlace(filepath.Dir(r.dst), job.DstRoot); err != nil {
		return fmt.Errorf("%s: %w", r.dstName(), err)
	}
	return nil
}

// interrupted returns err unchanged unless it is the end of the context,
// which it wraps with the progress saved; saveErr is the failure, if any, to
// save that progress.
func (r *run) interrupted(err, saveErr error) error {
	if err == nil || !r.isCtxErr(err) {
		return err
	}
	err = fmt.Errorf("%s: copy to %s interrupted with %d bytes durable: %w", r.srcName(), r.job.Dst, r.res.Written, err)
	if saveErr != nil {
		err = fmt.Errorf("%w; saving progress: %w", err, saveErr)
	}
	return err
}

// openSource opens the source and checks it against the job.
func (r *run) openSource() error {
	fd, err := openSource(r.job.Src, r.job.SrcRoot)
	if err != nil {
		return osErr(r.srcName(), "cannot open", err)
	}
	r.src, r.seg.fd = fd, fd
	if err := unix.Fstat(fd, &r.srcStat); err != nil {
		return osErr(r.srcName(), "cannot stat", err)
	}
	r.srcID = identityOf(&r.srcStat)
	// The O_NONBLOCK it was opened with (so that a FIFO in its place
	// cannot block the open) stays: reads of a regular file ignore it.
	if r.srcStat.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: %w: it is %s", r.srcName(), ErrNotRegular, fileKind(r.srcStat.Mode))
	}
	if r.srcStat.Size != r.job.Size {
		return fmt.Errorf("%s: %w: the file holds %d bytes, the transfer file says %d", r.srcName(), ErrSizeMismatch, r.srcStat.Size, r.job.Size)
	}
	// A file with as many bytes allocated as it holds has no hole worth
	// looking for: it is read whole, without a SEEK_DATA and a SEEK_HOLE
	// per file (cp decides the same way). Were a hole there after all
	// (blocks allocated past the end), its zeros are copied as data:
	// the same bytes.
	if !r.seg.explicit && r.srcStat.Blocks*512 >= r.srcStat.Size {
		r.seg.whole = true
	}
	return nil
}

// readWhole reads a small source whole, in one read, before anything
// else looks at it, when its copy starts from 0 and one piece of the copy
// would hold it anyway: job.Verify then inspects those very bytes, and
// the copy writes them, so the source is read once and by one system call.
func (r *run) readWhole() error {
	size := r.job.Size
	if r.job.Written != 0 || !r.seg.whole || size <= 0 || size > int64(r.c.t.chunkSize(len(r.c.buf))) {
		return nil
	}
	if err := r.w.waitBytes(r.ctx, int(size)); err != nil {
		return err
	}
	got, err := preadFull(r.src, r.c.buf[:size], 0)
	if err != nil {
		return osErr(r.srcName(), "cannot read at byte 0", err)
	}
	if int64(got) < size {
		return r.sourceChanged(fmt.Sprintf("it ended at byte %d, SIZE is %d", got, size))
	}
	r.whole = r.c.buf[:size]
	return nil
}

// wholeSource reads the bytes of a source readWhole read whole. Bytes
// hands them over to look at without a copy, not to keep.
type wholeSource []byte

func (w wholeSource) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: %w", off, fs.ErrInvalid)
	}
	if off >= int64(len(w)) {
		return 0, io.EOF
	}
	n := copy(p, w[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Bytes returns the source's bytes.
func (w wholeSource) Bytes() []byte { return w }

// startCheck hands the open source to job.Verify: the bytes readWhole
// read, or a duplicate of the descriptor, which the check may read
// through concurrently with the copy and close on its own.
func (r *run) startCheck() error {
	if r.job.Verify == nil {
		return nil
	}
	var src io.ReaderAt
	if r.whole != nil {
		src = wholeSource(r.whole)
	} else {
		dup, err := unix.FcntlInt(uintptr(r.src), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return osErr(r.srcName(), "cannot duplicate the descriptor", err)
		}
		r.srcFile = os.NewFile(uintptr(dup), r.job.Src)
		src = r.srcFile
	}
	chk, rs, err := r.job.Verify.Start(r.ctx, src, r.job.Size)
	if err != nil {
		return err
	}
	r.check = chk
	if rs != nil {
		rs, err := normalizeRanges(r.c.ranges, rs, r.job.Size)
		r.c.ranges = rs[:0]
		if err != nil {
			return fmt.Errorf("%s: %w", r.srcName(), err)
		}
		r.seg.explicit, r.seg.ranges, r.seg.i = true, rs, 0
	}
	return nil
}

// refuse returns the verdict err of job.Verify on a corrupt source after
// removing the partial copy; the end of the context is returned as is.
func (r *run) refuse(err error) error {
	if r.isCtxErr(err) {
		return err
	}
	return fmt.Errorf("%w%s", err, r.discardTemp())
}

// openTemp resumes the partial copy at job.Written or starts a new one.
func (r *run) openTemp() error {
	// The Batch's, opened once for all its copies to that directory; the
	// Batch makes the new directories durable when it publishes, a commit
	// of progress before.
	d, err := r.job.Batch.openDir(filepath.Dir(r.dst), r.job.DstRoot, r.dstName())
	if err != nil {
		return err
	}
	r.dir, r.bdir, r.newDirParents = d.fd, d, d.parents
	var st unix.Stat_t
	if err := unix.Fstatat(r.dir, r.base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		// rename(2) could not replace it: fail before copying anything.
		return fmt.Errorf("%s: %w: it is a directory", r.dstName(), unix.EISDIR)
	}
	w := r.job.Written
	var why string
	switch {
	case w < 0:
		why = fmt.Sprintf("WRITTEN %d is negative", w)
	case w > r.job.Size:
		why = fmt.Sprintf("WRITTEN %d exceeds SIZE %d", w, r.job.Size)
	case w > 0:
		ok, reason, err := r.resume()
		if err != nil || ok {
			return err
		}
		why = reason
	}
	// A fresh copy that is not to be resumed goes to an unnamed file
	// where it can.
	r.anon = w == 0 && !r.commitsAsItGoes()
	if err := r.createTemp(); err != nil {
		return err
	}
	if why != "" {
		r.res.Restarted = why
		if r.job.Size > 0 {
			if err := r.commit(0, 0); err != nil {
				return fmt.Errorf("%s: recording the restart from 0: %w", r.srcName(), err)
			}
		}
	}
	return nil
}

// resume opens the partial copy at job.Written. It returns ok=false with
// the reason when the partial copy cannot be resumed.
func (r *run) resume() (ok bool, why string, err error) {
	w := r.job.Written
	st, why, err := r.openPartial()
	if err != nil || why != "" {
		return false, why, err
	}
	rec, why, err := r.resumable(&st)
	if errors.Is(err, ErrPartialForeign) {
		// The name leads to another owner's partial copy: whatever this
		// copy made durable there is gone, and WRITTEN must not claim it.
		_ = r.commit(0, 0)
	}
	if err != nil || why != "" {
		_ = r.closeTemp()
		return false, why, err
	}
	r.tempSize, r.pos, r.kicked, r.dropped = w, w, w, w
	if why, err := r.checkCommitted(rec); err != nil || why != "" {
		_ = r.closeTemp()
		return false, why, err
	}
	if r.c.o.VerifyAfter || r.check != nil {
		r.crc, err = r.crcOf(r.src, &r.seg, w, r.srcName(), r.check)
	}
	if rf := (*refusal)(nil); errors.As(err, &rf) {
		return false, "", r.refuse(rf.err)
	}
	if err != nil {
		return false, "", err
	}
	if st.Size > w {
		if err := ftruncate(r.tmp, w); err != nil {
			return false, "", osErr(r.dstName(), "cannot truncate partial copy "+r.tmpPath, err)
		}
	}
	// A token of this copy's own from here on: the copy that wrote the
	// bytes before is over.
	r.rec = partialRecord{owner: r.c.owner, token: newToken(), src: r.srcID.record(), ino: st.Ino, written: w, crc: r.crc}
	if r.recorded = writeRecord(r.tmp, r.rec); !r.recorded {
		_ = r.closeTemp()
		return false, fmt.Sprintf("partial copy %s cannot keep its record", r.tmpPath), nil
	}
	r.res.Written = w
	r.crcPos = w
	r.lastSync = time.Now()
	return true, "", nil
}

// openPartial opens the partial copy as r.tmp and takes its lock, and
// returns its status, or why there is none to resume (it is missing).
func (r *run) openPartial() (unix.Stat_t, string, error) {
	var st unix.Stat_t
	fd, err := openAt(r.dir, r.tmpName, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return st, fmt.Sprintf("partial copy %s is missing", r.tmpPath), nil
	}
	if err != nil {
		return st, "", osErr(r.dstName(), "cannot open partial copy "+r.tmpPath, err)
	}
	r.tmp = fd
	if err := r.lockTemp(); err != nil {
		return st, "", err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return st, "", osErr(r.dstName(), "cannot stat partial copy "+r.tmpPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, "", fmt.Errorf("%s: partial copy %s: %w: it is %s", r.dstName(), r.tmpPath, ErrNotRegular, fileKind(st.Mode))
	}
	r.tmpStat = st
	return st, "", nil
}

// checkCommitted sets r.crc to the CRC32 of the partial copy's first
// job.Written bytes once sure that they are the ones the last commit made
// durable: the CRC32 of the bytes the record vouches for is read from the
// partial copy and compared with the record (a record of a later commit
// than WRITTEN, from a crash between the two, vouches for its own length).
// It returns why not when they differ.
func (r *run) checkCommitted(rec partialRecord) (string, error) {
	w, fd := r.job.Written, r.tmp
	who := r.dstName() + ": partial copy " + r.tmpPath
	got, err := r.crcOf(fd, &segmenter{fd: fd}, rec.written, who, nil)
	if err != nil {
		return "", err
	}
	if got != rec.crc {
		return fmt.Sprintf("partial copy %s was written by someone else since the last commit: its first %d bytes have CRC32 %#08x, %#08x when committed",
			r.tmpPath, rec.written, got, rec.crc), nil
	}
	if rec.written != w {
		if got, err = r.crcOf(fd, &segmenter{fd: fd}, w, who, nil); err != nil {
			return "", err
		}
	}
	r.crc = got
	return "", nil
}

// resumable returns the record of the partial copy open at r.tmp (whose
// status is st), or why it cannot be resumed at job.Written: a copy that
// no daemon watched may have been written by others meanwhile. A partial
// copy of another owner is no reason to start again: it is not this
// copy's to empty (ErrPartialForeign).
func (r *run) resumable(st *unix.Stat_t) (partialRecord, string, error) {
	w := r.job.Written
	rec, ok, err := readRecord(r.tmp)
	switch {
	case err != nil:
		return rec, fmt.Sprintf("partial copy %s carries a record that does not decode (%v)", r.tmpPath, err), nil
	case !ok:
		return rec, fmt.Sprintf("partial copy %s carries no record of the source it was read from", r.tmpPath), nil
	case rec.owner != r.c.owner:
		return rec, "", fmt.Errorf("%s: partial copy %s: %w; left alone, will try again", r.dstName(), r.tmpPath, ErrPartialForeign)
	case rec.src != r.srcID.record():
		return rec, fmt.Sprintf("the source changed since partial copy %s was written (it is now %s)", r.tmpPath, r.srcID), nil
	case rec.ino != st.Ino:
		return rec, fmt.Sprintf("partial copy %s is another file (inode %d) than the one committed (inode %d): replaced", r.tmpPath, st.Ino, rec.ino), nil
	case st.Uid != uint32(unix.Geteuid()) || st.Mode&0o077 != 0:
		return rec, fmt.Sprintf("partial copy %s could be written by others (owner %d, mode %#o)", r.tmpPath, st.Uid, st.Mode&0o7777), nil
	case st.Size < w:
		return rec, fmt.Sprintf("partial copy %s holds %d bytes, fewer than WRITTEN %d", r.tmpPath, st.Size, w), nil
	case rec.written < w:
		return rec, fmt.Sprintf("partial copy %s was last committed at %d bytes, fewer than WRITTEN %d", r.tmpPath, rec.written, w), nil
	case st.Size < rec.written:
		return rec, fmt.Sprintf("partial copy %s holds %d bytes, fewer than the %d of its last commit", r.tmpPath, st.Size, rec.written), nil
	}
	return rec, "", nil
}

// createTemp creates (or empties) the partial copy and its directories.
func (r *run) createTemp() error {
	fd := -1
	if r.anon {
		var err error
		fd, err = r.job.Batch.createAnon(r.dir)
		if err != nil && !errors.Is(err, errNoAnon) {
			return osErr(r.dstName(), "cannot create partial copy in "+filepath.Dir(r.dst), err)
		}
		r.anon = err == nil
		// A partial copy at the partial copy's name is left from an earlier
		// copy that recorded no progress (a lone copy, or one killed before
		// its rename over DESTINATION): it is reclaimed here, as a named
		// copy from 0 would reclaim it, or it would outlive the flush.
		// One of another owner is left alone: an unnamed copy needs the
		// name only if DESTINATION exists (see nameAnon).
		if r.anon {
			if err := r.removeStalePartial(); err != nil && !errors.Is(err, ErrPartialForeign) {
				_ = unix.Close(fd)
				return err
			}
		}
	}
	if !r.anon {
		var err error
		if fd, err = r.createNamed(); err != nil {
			return err
		}
	}
	r.tmp = fd
	// An unnamed partial copy is locked only if it is ever given its
	// partial copy's name (nameAnon): no other writer can reach it before.
	if !r.anon {
		if err := r.lockTemp(); err != nil {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return osErr(r.dstName(), "cannot stat partial copy "+r.tmpPath, err)
	}
	r.tmpStat = st
	if !r.anon && r.commitsAsItGoes() {
		// A resumable copy's partial copy carries its owner and token from
		// the start, so that no other writer takes it for a stale one. An
		// unnamed one carries none, and a batched file's named one (on a file
		// system without O_TMPFILE, where each is a round trip to a
		// server) gets one only if it commits progress: it is published
		// within its group, its creation with O_EXCL and the checks of its
		// name being what keeps other writers' bytes from being claimed.
		r.rec = partialRecord{owner: r.c.owner, token: newToken(), src: r.srcID.record(), ino: st.Ino}
		r.recorded = writeRecord(fd, r.rec)
	}
	r.dirsPending = true
	r.tempSize, r.pos, r.crc, r.crcPos, r.kicked, r.dropped = 0, 0, 0, 0, 0, 0
	r.res.Written = 0
	r.lastSync = time.Now()
	return nil
}

// createNamed creates the named partial copy, 0600 (the final mode is
// given when it is published), and only as a new file (O_EXCL): a file
// found at the name is never emptied or written, since where file locks
// are node-local or missing its writer may be at work on another node.
// One of this owner's, or one without a record, that no writer holds
// locked is removed and the name taken afresh; one of another owner is
// left alone (ErrPartialForeign).
func (r *run) createNamed() (int, error) {
	for tries := 0; ; tries++ {
		fd, err := openAt(r.dir, r.tmpName, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err == nil {
			return fd, nil
		}
		if !errors.Is(err, unix.EEXIST) || tries == 2 {
			return -1, osErr(r.dstName(), "cannot create partial copy "+r.tmpPath, err)
		}
		if err := r.removeStalePartial(); err != nil {
			return -1, err
		}
	}
}

// copyData copies the data ranges of [pos,Size), committing batches.
func (r *run) copyData() error {
	size := r.job.Size
	for r.pos < size {
		ds, de, ok, err := r.seg.next(r.pos, size)
		if err != nil {
			return osErr(r.srcName(), "cannot locate data (SEEK_DATA/SEEK_HOLE)", err)
		}
		if !ok {
			break
		}
		for off := ds; off < de; off = r.pos {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			n := int(min(int64(r.c.t.chunkSize(len(r.c.buf))), de-off))
			p, err := r.readChunk(off, n)
			if err != nil {
				return err
			}
			if err := r.writeChunk(off, p); err != nil {
				return err
			}
			if err := r.chunkDone(); err != nil {
				return err
			}
		}
	}
	return nil
}

// readChunk returns the n bytes of the source at off: from the whole
// source read before (readWhole), or read now once BW allows.
func (r *run) readChunk(off int64, n int) ([]byte, error) {
	if r.whole != nil {
		return r.whole[off : off+int64(n)], nil // read, and paid for, by readWhole
	}
	if err := r.w.waitBytes(r.ctx, n); err != nil {
		return nil, err
	}
	buf := r.c.buf[:n]
	got, err := preadFull(r.src, buf, off)
	if err != nil {
		return nil, osErr(r.srcName(), fmt.Sprintf("cannot read at byte %d", off), err)
	}
	if got < n {
		return nil, r.sourceChanged(fmt.Sprintf("it ended at byte %d, SIZE is %d", off+int64(got), r.job.Size))
	}
	return buf, nil
}

// writeChunk writes p, the source's bytes at off, to the partial copy,
// feeds them to the check and the CRC, and moves pos past them.
func (r *run) writeChunk(off int64, p []byte) error {
	t := r.c.t
	// Zeros read from a tail SEEK_DATA called a hole stay a hole in the
	// copy (the partial copy ends before them until extended).
	hole := r.seg.inTail(off) && allZero(p)
	if !hole {
		began := t.clock()
		if err := pwriteFull(r.tmp, p, off); err != nil {
			return osErr(r.dstName(), "cannot write partial copy "+r.tmpPath, err)
		}
		t.observe(began, autobw.Write, int64(len(p)))
	}
	if r.check != nil {
		if err := r.check.Feed(off, p); err != nil {
			return r.refuse(err)
		}
	}
	r.crc = crc32.Update(crcZeros(r.crc, off-r.crcPos), crc32.IEEETable, p)
	end := off + int64(len(p))
	r.crcPos, r.pos, r.unsynced = end, end, r.unsynced+int64(len(p))
	if !hole {
		r.tempSize = max(r.tempSize, end)
		r.kick(kickBytes)
	}
	return nil
}

// chunkDone follows the copy of a chunk up to pos: it pauses for PERCENT,
// and fsyncs and commits a batch once SyncBytes or SyncInterval is
// reached.
func (r *run) chunkDone() error {
	// Pause for PERCENT here, before a batch is fsynced and committed: no
	// pause may stand between durable bytes and their commit, since an
	// interruption during it would lose the commit.
	if err := r.w.Pace(r.ctx); err != nil {
		return err
	}
	if r.pos < r.job.Size && !r.anon && (r.unsynced >= r.c.o.SyncBytes || time.Since(r.lastSync) >= r.c.o.SyncInterval) {
		return r.syncCommit()
	}
	return nil
}

// syncCommit makes [0,pos) durable and commits pos.
func (r *run) syncCommit() error {
	if err := r.syncTemp(r.pos); err != nil {
		return err
	}
	return r.commitSynced()
}

// commitSynced commits pos, made durable, once sure the bytes are this
// copy's, at DESTINATION's partial-copy path, read from the source.
func (r *run) commitSynced() error {
	if err := r.checkToken(); err != nil {
		return err
	}
	if r.recorded || !r.anon && r.rec.token == "" {
		// After the fsync: the record never describes bytes that are not
		// durable. A record lost in a crash makes the resume start from 0.
		if r.rec.token == "" { // a batch's first commit of progress
			r.rec = partialRecord{owner: r.c.owner, token: newToken(), src: r.srcID.record(), ino: r.tmpStat.Ino}
		}
		r.rec.written, r.rec.crc = r.pos, r.crc
		r.recorded = writeRecord(r.tmp, r.rec)
	}
	if err := r.syncDirs(); err != nil {
		return err
	}
	if err := r.checkTempLinked(); err != nil {
		return err
	}
	if err := r.checkTempPlace(); err != nil {
		return err
	}
	if err := r.checkSource(); err != nil {
		return err
	}
	r.res.Written = r.pos
	if err := r.commit(r.pos, r.crc); err != nil {
		return fmt.Errorf("%s: recording %d bytes durable: %w", r.srcName(), r.pos, err)
	}
	return nil
}

// checkToken fails unless the partial copy still carries the record this
// copy last wrote on it: a writer that took the file over (where locks are
// node-local or missing, another node's daemon serving the same
// DESTINATION) writes its own record with its own token, so the bytes are
// not claimed. Without a record (no user extended attributes) there is
// nothing to check: the creation with O_EXCL and the checks of the name
// are then the only defence (see docs).
func (r *run) checkToken() error {
	if !r.recorded {
		return nil
	}
	if hasRecord(r.tmp, r.rec) {
		return nil
	}
	rec, ok, err := readRecord(r.tmp)
	detail := "it carries no record now"
	if ok {
		detail = fmt.Sprintf("its record is another writer's (token %s, not %s)", rec.token, r.rec.token)
	} else if err != nil {
		detail = err.Error()
	}
	// The file is someone else's now: not removed, only left.
	_ = r.closeTemp()
	r.forget()
	return fmt.Errorf("%s: %w: partial copy %s: %s; nothing of it is claimed", r.dstName(), ErrPartialTaken, r.tmpPath, detail)
}

// finalMode gives the partial copy, created 0600 so that only the daemon
// writes it, the mode of a file created under the process's umask, just
// before it is published.
func (r *run) finalMode() error {
	if r.tmpStat.Mode&0o7777 == r.c.mode {
		return nil
	}
	if err := eintr.Do(func() error { return unix.Fchmod(r.tmp, r.c.mode) }); err != nil {
		return osErr(r.dstName(), "cannot set the mode of partial copy "+r.tmpPath, err)
	}
	return nil
}

// checkTempLinked fails if the partial copy was removed, or replaced by a
// rename over its name, during the copy: bytes fsynced into a file that no
// name leads to are not durable at the destination and must not be
// committed. fstat(2) on the descriptor tells, without a path lookup.
func (r *run) checkTempLinked() error {
	var st unix.Stat_t
	if err := unix.Fstat(r.tmp, &st); err != nil {
		return osErr(r.dstName(), "cannot stat partial copy "+r.tmpPath, err)
	}
	if st.Nlink == 0 {
		_ = r.closeTemp()
		r.forget()
		return fmt.Errorf("%s: %w: partial copy %s was removed or replaced during the copy", r.dstName(), ErrDestinationChanged, r.tmpPath)
	}
	return nil
}

// lockTemp takes the partial copy's lock (see lockPartial).
func (r *run) lockTemp() error {
	switch err := lockPartial(r.tmp); {
	case errors.Is(err, ErrPartialLocked):
		err = r.lockedErr(r.tmp, err)
		_ = r.closeTemp()
		return err
	case err != nil:
		_ = r.closeTemp()
		return osErr(r.dstName(), "cannot lock partial copy "+r.tmpPath, err)
	}
	return nil
}

// lockedErr tells that the partial copy open as fd could not be locked
// (err, from lockPartial), naming the holder when it is this process's
// own abandoned fsync of it (see syncOrAbandon) rather than another
// writer.
func (r *run) lockedErr(fd int, err error) error {
	var st unix.Stat_t
	if errors.Is(err, ErrPartialLocked) && unix.Fstat(fd, &st) == nil &&
		r.c.t.syncInFlight(fileKey{dev: uint64(st.Dev), ino: st.Ino}) {
		err = ErrPartialSyncing
	}
	return fmt.Errorf("%s: partial copy %s: %w; will try again", r.dstName(), r.tmpPath, err)
}

// checkTempPlace fails if the partial copy's path, looked up afresh from
// the root, no longer leads to the file being written: its directory was
// renamed away (and perhaps recreated), so the bytes are not where
// DESTINATION says. The partial copy, in the moved directory, is removed.
func (r *run) checkTempPlace() error {
	var st unix.Stat_t
	err := r.tmpPlace.stat(&st)
	if err == nil && sameFile(&st, &r.tmpStat) {
		return nil
	}
	detail := "leads to another file"
	if err != nil {
		detail = fmt.Sprintf("cannot be looked up (%v)", err)
	}
	return fmt.Errorf("%s: %w: %s %s, not to the partial copy being written%s",
		r.dstName(), ErrDestinationMoved, r.tmpPath, detail, r.discardTemp())
}

// checkSource fails unless the source is still the file the copy started
// from: same size, unmodified (fstat of the descriptor), and still the file
// its path leads to (a fresh lookup, beneath the root when confined, so
// that a replacement by rename shows). A size that no longer matches SIZE
// is ErrSourceChanged; any other difference ErrSourceReplaced. Either way
// the partial copy, which may mix two versions, is discarded.
func (r *run) checkSource() error {
	var st unix.Stat_t
	var fresh unix.Stat_t
	lookup := r.srcPlace.stat(&fresh)
	if r.src >= 0 {
		if err := unix.Fstat(r.src, &st); err != nil {
			return osErr(r.srcName(), "cannot stat", err)
		}
	} else if lookup == nil {
		// Closed already (a copy held by a Batch): the file the path leads
		// to now must be the one copied, unmodified.
		st = fresh
		if !sameFile(&fresh, &r.srcStat) {
			return r.sourceReplaced(r.srcID.differs(identityOf(&fresh)))
		}
	}
	now := identityOf(&st)
	switch {
	case errors.Is(lookup, unix.ENOENT):
		return r.sourceReplaced("it was removed from its path")
	case lookup != nil:
		return osErr(r.srcName(), "cannot look up", lookup)
	case now.size != r.job.Size:
		return r.sourceChanged(fmt.Sprintf("it now holds %d bytes, SIZE is %d", now.size, r.job.Size))
	case !sameFile(&fresh, &st):
		return r.sourceReplaced(r.srcID.differs(identityOf(&fresh)))
	}
	if why := r.srcID.differs(now); why != "" {
		return r.sourceReplaced(why)
	}
	return nil
}

// syncTemp extends the partial copy to at least size and fsyncs it.
func (r *run) syncTemp(size int64) error {
	if err := r.extendTemp(size); err != nil {
		return err
	}
	began := r.c.t.clock()
	if err := fsync(r.tmp); err != nil {
		return osErr(r.dstName(), "cannot fsync partial copy "+r.tmpPath, err)
	}
	r.c.t.observe(began, autobw.Commit, r.unsynced)
	r.unsynced, r.lastSync = 0, time.Now()
	r.dropCache()
	return nil
}

// extendTemp extends the partial copy to at least size: the hole at the
// end of a sparse source.
func (r *run) extendTemp(size int64) error {
	if r.tempSize < size {
		if err := ftruncate(r.tmp, size); err != nil {
			return osErr(r.dstName(), "cannot extend partial copy "+r.tmpPath, err)
		}
		r.tempSize = size
	}
	return nil
}

// dropsCache tells whether the pages of this copy are to be dropped.
func (r *run) dropsCache() bool {
	return r.c.o.DropCache && r.job.Size >= DropCacheMin
}

// dropCache drops the pages of the partial copy made durable, and of the
// source they came from, with Options.DropCache.
func (r *run) dropCache() {
	if size := r.tempSize; r.dropsCache() && size > r.dropped {
		// Hints only: a failure costs memory, not correctness.
		if r.src >= 0 {
			_ = unix.Fadvise(r.src, r.dropped, size-r.dropped, unix.FADV_DONTNEED)
		}
		_ = unix.Fadvise(r.tmp, r.dropped, size-r.dropped, unix.FADV_DONTNEED)
		r.dropped = size
	}
}

// syncDirs fsyncs the directories whose entries this copy changed.
func (r *run) syncDirs() error {
	if !r.dirsPending {
		return nil
	}
	for _, d := range r.newDirParents {
		if err := fsyncDir(d); err != nil {
			return osErr(r.dstName(), "cannot fsync directory "+d, err)
		}
	}
	r.newDirParents = nil
	if err := fsync(r.dir); err != nil {
		return osErr(r.dstName(), "cannot fsync directory "+filepath.Dir(r.tmpPath), err)
	}
	r.dirsPending = false
	return nil
}

// stopSyncWait bounds how long an interrupted copy waits for the fsync of
// what it copied since its last commit. On a slow destination that fsync
// may write tens of MiB (up to SyncBytes) for tens of seconds, while the
// library waits for STOPPED (SCR_Finalize sends STOP and waits): past the
// bound, what was committed stands and the unsynced tail is not claimed.
const stopSyncWait = time.Second

// stopGrace returns a context with ctx's values that ends stopSyncWait from
// now, whatever becomes of ctx: the wait beyond STOP for a sync whose loss
// would take back what was copied (an interrupted copy's last commit, a
// published group's names).
func stopGrace(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), stopSyncWait)
}

// saveProgress commits what has been copied when a copy is interrupted,
// if it can be made durable within stopSyncWait.
func (r *run) saveProgress() error {
	// An unnamed partial copy cannot be resumed: its bytes go with it.
	if r.tmp < 0 || r.anon || r.pos <= r.res.Written || r.pos >= r.job.Size {
		return nil
	}
	if err := r.extendTemp(r.pos); err != nil {
		return err
	}
	ctx, cancel := stopGrace(r.ctx)
	defer cancel()
	synced, err := r.syncOrAbandon(ctx)
	if err != nil || !synced {
		return err
	}
	return r.commitSynced()
}

// syncOrAbandon fsyncs the partial copy until the fsync returns or ctx
// ends, whichever comes first. It reports false when ctx ended first: the
// fsync is abandoned, going on in a goroutine that closes the partial
// copy's descriptor (and so releases its lock) once it returns, and the
// copy has no partial copy open any more. A fsync that returned wins over
// an ended ctx.
func (r *run) syncOrAbandon(ctx context.Context) (bool, error) {
	fd := r.tmp
	began := r.c.t.clock()
	done := make(chan error, 1)
	go func() { done <- fsync(fd) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done:
		default:
			r.abandonSync(fd, done)
			return false, nil
		}
	}
	if err != nil {
		return false, osErr(r.dstName(), "cannot fsync partial copy "+r.tmpPath, err)
	}
	r.c.t.observe(began, autobw.Commit, r.unsynced)
	r.unsynced, r.lastSync = 0, time.Now()
	r.dropCache()
	return true, nil
}

// abandonSync leaves the fsync of the partial copy fd, whose outcome
// arrives on done, to finish on its own: the descriptor is closed once it
// returns, and meanwhile the partial copy is noted as locked by this
// process's own fsync (see Throttle.syncInFlight).
func (r *run) abandonSync(fd int, done <-chan error) {
	k := fileKey{dev: uint64(r.tmpStat.Dev), ino: r.tmpStat.Ino}
	t := r.c.t // not r: the goroutine outlives the copy
	t.syncAbandoned(k)
	r.tmp = -1
	go func() {
		<-done
		_ = unix.Close(fd)
		t.syncReturned(k)
	}()
}

// syncFinal makes the complete partial copy durable before it is
// published: it extends it to size and fsyncs it, unless ctx ends first
// (the flush is stopped). Then the fsync is abandoned (see syncOrAbandon),
// nothing is published, and the error wraps ctx's: WRITTEN stays at the
// last commit, and the partial copy, with its record, stays for the next
// copy to resume from there. On a stalled destination the fsync of up to
// SyncBytes can last minutes, while the library waits for STOPPED.
func (r *run) syncFinal(size int64) error {
	if err := r.extendTemp(size); err != nil {
		return err
	}
	synced, err := r.syncOrAbandon(r.ctx)
	if err != nil || synced {
		return err
	}
	return fmt.Errorf("%s: %w: stopped during the fsync of partial copy %s before it was published; nothing was published",
		r.dstName(), r.ctx.Err(), r.tmpPath)
}

// finish completes the partial copy, verifies it if asked, and hands it
// to its Batch, whose Sync makes it durable and publishes it.
func (r *run) finish() error {
	size := r.job.Size
	r.crc, r.crcPos = crcZeros(r.crc, size-r.crcPos), size
	if !r.c.o.VerifyAfter {
		// Extended, not fsynced: Batch.Sync makes it durable.
		if err := r.extendTemp(size); err != nil {
			return err
		}
	} else if err := r.syncFinal(size); err != nil {
		return err
	}
	// A copy is checked against its source when it is published (from
	// Batch.Sync); here too only when a verdict on its bytes is to come,
	// so that a source that changed under the check is told as changed,
	// not as corrupt.
	if r.check != nil || r.c.o.VerifyAfter {
		if err := r.checkSource(); err != nil {
			return err
		}
	}
	if r.check != nil {
		// Publishing waits for the verdict on the bytes copied.
		if err := r.check.Verdict(); err != nil {
			return r.refuse(err)
		}
	}
	if r.c.o.VerifyAfter {
		// Drop the cached pages so the check reads what storage holds.
		_ = unix.Fadvise(r.tmp, 0, 0, unix.FADV_DONTNEED)
		got, err := r.crcOf(r.tmp, &segmenter{fd: r.tmp}, size, r.dstName()+": partial copy "+r.tmpPath, nil)
		if err != nil {
			return err
		}
		if got != r.crc {
			return fmt.Errorf("%s: %w: the written copy has CRC32 %#08x, the data read from the source %#08x%s",
				r.dstName(), ErrVerifyMismatch, got, r.crc, r.discardTemp())
		}
	}
	return r.hold(r.job.Batch)
}

// commitsAsItGoes tells whether the copy's progress is committed as it
// goes, to be resumed after an interruption: a lone copy's, and any of a
// file too large to be batched (BatchMax). Its partial copy is named from
// the start and carries its record.
func (r *run) commitsAsItGoes() bool {
	return r.job.Batch.lone || r.job.Size > BatchMax(r.c.o)
}

// kick starts the write-back of the partial copy's bytes written since
// the last kick if there are at least min of them. A hint only: errors are
// left for the fsync to report.
func (r *run) kick(min int64) {
	if r.c.o.noKick || r.tempSize-r.kicked < min {
		return
	}
	_ = unix.SyncFileRange(r.tmp, r.kicked, r.tempSize-r.kicked, unix.SYNC_FILE_RANGE_WRITE)
	r.kicked = r.tempSize
}

// hold hands the complete, checked copy to the Batch b with its open
// partial copy (still locked): from here it is the Batch's, and the Result
// says so. The source is closed; publishing looks its path up afresh.
func (r *run) hold(b *Batch) error {
	if r.check != nil {
		r.check.Close()
		r.check = nil
	}
	if r.srcFile != nil {
		_ = r.srcFile.Close()
		r.srcFile = nil
	}
	if r.tempSize >= kickHeld {
		r.kick(1) // the Batch's sync then finds little left to write
	}
	if r.dropsCache() {
		// Now: the source's descriptor is not kept (one descriptor per
		// held copy, so that a batch of thousands stays within
		// RLIMIT_NOFILE); Batch.Sync drops the partial copy's pages.
		_ = unix.Fadvise(r.src, 0, 0, unix.FADV_DONTNEED)
	}
	_ = unix.Close(r.src)
	b.hold(r)
	r.tmp, r.src, r.dir = -1, -1, -1
	r.res = Result{Written: r.res.Written, CRC: r.crc, Held: true, Restarted: r.res.Restarted}
	return r.paceDone()
}

// place gives the durable partial copy its final name: the link of an
// unnamed file, or the rename of a named partial copy once sure that the
// name is still ours and still where DESTINATION leads.
func (r *run) place() error {
	if r.anon {
		// Nothing can have removed or replaced a file without a name, but
		// its directory may have moved: the link, and a rename over a file
		// kept there, would land in the moved directory.
		if err := r.checkDirPlace(); err != nil {
			return err
		}
		if err := r.linkAnon(); err != nil {
			return err
		}
	} else {
		if err := r.checkTempLinked(); err != nil {
			return err
		}
		if err := r.checkTempPlace(); err != nil {
			return err
		}
		if err := r.checkToken(); err != nil {
			return err
		}
		if err := r.finalMode(); err != nil {
			return err
		}
		if r.recorded {
			dropIdentity(r.tmp)
		}
		if err := eintr.Do(func() error { return unix.Renameat(r.dir, r.tmpName, r.dir, r.base) }); err != nil {
			return r.renameFailed(err)
		}
	}
	r.dirsPending = true
	return nil
}

// checkDirPlace fails unless DESTINATION's directory, looked up afresh
// (from the root when confined), is still the directory the Batch opened
// and the copy was made in: the check checkTempPlace makes for a named
// partial copy, for an unnamed one, before it is linked. An unnamed copy
// that fails it leaves nothing behind. Only a Batch's copy is unnamed, so
// r.bdir is set.
func (r *run) checkDirPlace() error {
	var st unix.Stat_t
	err := r.dirPlace.stat(&st)
	if err == nil && st.Dev == r.bdir.dev && st.Ino == r.bdir.ino {
		return nil
	}
	detail := "leads to another directory"
	if err != nil {
		detail = fmt.Sprintf("cannot be looked up (%v)", err)
	}
	return fmt.Errorf("%s: %w: %s %s than the one the copy was made in; nothing was linked%s",
		r.dstName(), ErrDestinationMoved, r.dirPlace.path, detail, r.discardTemp())
}

// checkPlaced makes sure that DESTINATION, resolved afresh (from the root
// when confined), leads to the file just placed: a directory on the way
// moved or replaced meanwhile would have taken the copy elsewhere.
func (r *run) checkPlaced() error {
	var st unix.Stat_t
	if err := r.dstPlace.stat(&st); err != nil || !sameFile(&st, &r.tmpStat) {
		detail := "leads to another file"
		if err != nil {
			detail = fmt.Sprintf("cannot be looked up (%v)", err)
		}
		detail += r.unlink()
		_ = r.closeTemp()
		r.forget()
		return fmt.Errorf("%s: %w: after publishing, %s %s; the copy went to the directory's old place and is not recorded",
			r.dstName(), ErrDestinationMoved, r.dst, detail)
	}
	return nil
}

// unlink undoes the link of an unnamed copy that replaced nothing
// (linked), when it went to a directory that moved meanwhile: the name is
// removed while it still leads to the copy. A rename over a file cannot be
// undone. It returns a note for the error message.
func (r *run) unlink() string {
	if !r.linked || r.dir < 0 {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Fstatat(r.dir, r.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(&st, &r.tmpStat) {
		return ""
	}
	if err := unix.Unlinkat(r.dir, r.base, 0); err != nil {
		return fmt.Sprintf(" (removing it from there failed: %v)", err)
	}
	return "; it was removed from there"
}

// renameFailed reports that the partial copy could not be renamed over
// DESTINATION (a directory there, for one). A copy that commits as it
// goes keeps it, to resume; a batched file's copy is made again from 0
// anyway, and its partial copy, named only for this rename, is removed.
func (r *run) renameFailed(err error) error {
	err = osErr(r.dstName(), "cannot rename partial copy "+r.tmpPath+" into place", err)
	if !r.commitsAsItGoes() {
		err = fmt.Errorf("%w%s", err, r.discardTemp())
	}
	return err
}

// paceDone pays for the fsyncs and the publishing work too, so the share
// holds over whole files; an interruption here loses nothing, the copy is
// complete.
func (r *run) paceDone() error {
	if err := r.w.Pace(r.ctx); err != nil && !r.isCtxErr(err) {
		return err
	}
	return nil
}

// sourceChanged returns ErrSourceChanged with detail, after discarding the
// partial copy, which may now mix old and new data.
func (r *run) sourceChanged(detail string) error {
	return fmt.Errorf("%s: %w: %s%s", r.srcName(), ErrSourceChanged, detail, r.discardTemp())
}

// sourceReplaced is sourceChanged for ErrSourceReplaced.
func (r *run) sourceReplaced(detail string) error {
	return fmt.Errorf("%s: %w: %s%s", r.srcName(), ErrSourceReplaced, detail, r.discardTemp())
}

// discardTemp removes the partial copy so that the next Copy starts over,
// and returns a note for the error message. The name is removed only while
// it still leads to the file this copy wrote: a file someone put in its
// place is not this copy's to remove.
func (r *run) discardTemp() string {
	note := "; the partial copy was removed"
	if r.tmp >= 0 && !r.anon {
		var st unix.Stat_t
		err := unix.Fstatat(r.dir, r.tmpName, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && sameFile(&st, &r.tmpStat) {
			err = unix.Unlinkat(r.dir, r.tmpName, 0)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			note = fmt.Sprintf(" (removing partial copy %s failed: %v)", r.tmpPath, err)
		}
	}
	_ = r.closeTemp()
	r.forget()
	return note
}

// forget records that no byte of the copy is durable any more (the partial
// copy is gone), so the transfer file stops claiming any. A failure to
// record it is left to the error being returned: the next Copy finds no
// partial copy and restarts from 0, committing 0 first.
func (r *run) forget() {
	if r.res.Written > 0 {
		_ = r.commit(0, 0)
	}
	r.res.Written = 0
}

// crcOf returns the CRC32 of [0,limit) of fd, reading only the data ranges
// seg yields. who names the file in errors.
//
// When check is set, every piece read is fed to it as well; its refusal is
// returned as a *refusal.
func (r *run) crcOf(fd int, seg *segmenter, limit int64, who string, check Check) (uint32, error) {
	buf := r.c.buf
	var crc uint32
	var at int64 // crc covers [0,at)
	for at < limit {
		ds, de, ok, err := seg.next(at, limit)
		if err != nil {
			return 0, osErr(who, "cannot locate data (SEEK_DATA/SEEK_HOLE)", err)
		}
		if !ok {
			break
		}
		crc, at = crcZeros(crc, ds-at), ds
		for at < de {
			if err := r.ctx.Err(); err != nil {
				return 0, err
			}
			n := int(min(int64(len(buf)), de-at))
			got, err := preadFull(fd, buf[:n], at)
			if err != nil {
				return 0, osErr(who, fmt.Sprintf("cannot read at byte %d", at), err)
			}
			if got < n {
				return 0, fmt.Errorf("%s: %w: it ended at byte %d, %d expected", who, ErrSourceChanged, at+int64(got), limit)
			}
			if check != nil {
				if err := check.Feed(at, buf[:n]); err != nil {
					if r.isCtxErr(err) {
						return 0, err
					}
					return 0, &refusal{err}
				}
			}
			crc, at = crc32.Update(crc, crc32.IEEETable, buf[:n]), at+int64(n)
			if err := r.w.Pace(r.ctx); err != nil {
				return 0, err
			}
		}
	}
	return crcZeros(crc, limit-at), nil
}

// closeTemp closes the partial copy if it is open.
func (r *run) closeTemp() error {
	if r.tmp < 0 {
		return nil
	}
	err := unix.Close(r.tmp)
	r.tmp = -1
	return err
}

// closeFiles closes whatever is still open. A failing close of the partial
// copy is reported: on some file systems it is where write errors surface.
func (r *run) closeFiles() error {
	var err error
	if r.check != nil {
		r.check.Close()
		r.check = nil
	}
	if r.srcFile != nil {
		_ = r.srcFile.Close()
		r.srcFile = nil
	}
	if r.tmp >= 0 {
		if cerr := r.closeTemp(); cerr != nil {
			err = osErr(r.dstName(), "cannot close partial copy "+r.tmpPath, cerr)
		}
	}
	if r.src >= 0 {
		_ = unix.Close(r.src)
		r.src = -1
	}
	r.dir = -1 // the Batch's (openTemp), closed by its Sync
	return err
}
