package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/scr-transferd/scr-transferd/internal/beneath"
	"github.com/scr-transferd/scr-transferd/internal/byterange"
	"golang.org/x/sys/unix"
)

// Kind is the checkpoint format of a file.
type Kind string

// The kinds Inspect recognises.
const (
	// Plain is any file whose content is not one of the formats below.
	Plain Kind = "plain"
	// SION is a SIONlib container (file format versions 3 to 5).
	SION Kind = "sion"
	// FTIFF is an FTI checkpoint written in FTI-FF mode.
	FTIFF Kind = "fti-ff"
	// LIME is a LIME file, including SciDAC (QIO) files and partition volumes.
	LIME Kind = "lime"
)

// Range is the byte range [Off, Off+Len) of a file; flush.Range is the
// same type.
type Range = byterange.Range

// Report describes a file Inspect identified and validated.
type Report struct {
	Path string
	Kind Kind
	// Size is the apparent size of the file in bytes.
	Size int64
	// Ranges are the sorted, merged byte ranges that hold data. Only SIONlib
	// containers have holes by definition; every other kind has the single
	// range [0,Size), or none for an empty file.
	Ranges []Range
	// DataBytes is the sum of the lengths of Ranges.
	DataBytes int64
	// Companions are the absolute paths of the other physical files of the
	// same set: the other members of a multi-file SIONlib container (listed
	// whether or not they are present) and the other volumes of a LIME
	// partition set that were found beside the file.
	Companions []string
	// Detail is one human-readable line about the content.
	Detail string
	// Warnings are findings that do not make the file unsound but that an
	// operator should see, such as bytes after a SIONlib container's metadata,
	// missing members of a multi-file container or an FTI-FF checkpoint that
	// FTI 1.6 itself will refuse on restart.
	Warnings []string
}

// FormatError is a precise verdict on a corrupt file.
type FormatError struct {
	Path string
	Kind Kind
	// Code names the problem, for example E_BAD_MAGIC or E_CHUNK_HASH.
	Code string
	// Offset is the file offset the problem was found at, or -1.
	Offset int64
	Msg    string
}

// Error returns "<path>: <kind>: <msg> (<code>)".
func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: %s: %s (%s)", e.Path, e.Kind, e.Msg, e.Code)
}

// streamBufSize is the size of the buffer that checksummed data is read
// through; it is reused for every read of one Inspect call.
const streamBufSize = 1 << 20

// Inspect identifies and validates the file at path.
//
// It returns (*Report, nil) for a sound file. For a corrupt file it returns a
// partial *Report (Path, Kind, Size and, when known, Companions) and a
// *FormatError; errors.As finds it. Problems reading the file are returned as
// wrapped os errors with a nil Report.
//
// The kind is decided by content. A file whose magic number is damaged is
// still recognised when the rest of its structure is intact. FTI-FF has no
// magic number: a file is FTI-FF when its file meta is found at or near its
// end. An FTI-FF file cut before its meta began holds nothing but data, and
// a SIONlib or LIME file whose magic was overwritten may show no structure
// either, so a name that claims a format (see nameClaims: *.fti, *.sion,
// *.lime, ...) counts as a claim the content must back: such a file whose
// content matches no format is reported as a damaged file of the claimed
// kind (E_META_HASH for FTI-FF, E_BAD_MAGIC otherwise) rather than flushed
// as a plain one. FTI's other I/O modes use the same names; flush those with
// verification off.
//
// A member of a multi-file SIONlib container is checked together with the
// members present beside it; absent members are listed in Companions and
// named in Warnings. A LIME partition volume is checked as part of its set:
// every volume found must frame correctly and their site lists must cover
// the lattice exactly once (E_INCOMPLETE_SET otherwise). The checksums of the
// set, which only the master volume holds, are verified when the master is
// inspected.
func Inspect(ctx context.Context, path string) (*Report, error) {
	return inspect(ctx, osFS{}, path, Options{})
}

// Options tune InspectWith, InspectFile and StartCheck.
type Options struct {
	// Pace, if set, is called after every piece (at most 1 MiB) that is
	// read for hashing, so that the caller can keep verification within
	// PERCENT share of working time; an error from it stops the inspection.
	Pace func(ctx context.Context) error
	// RootDir, if set, confines the files an inspection opens by path (the
	// file itself for InspectWith, and its companions: the other members of
	// a multi-file SIONlib container, the other volumes of a LIME partition
	// set) to the directory it names, by the rule of package beneath: a
	// path lexically outside RootDir counts as absent; one that a symbolic
	// link leads outside, or that is itself a symbolic link, is an error
	// naming it. The directory is opened the first time a file is needed,
	// and closed when the inspection ends: most checkpoints have no
	// companion, and opening a root for each of thousands of small files
	// would cost more than checking them. Unset, files are opened by path.
	RootDir string
	// Buffers, if set, lends the inspection its buffer for reading the
	// end of the file, so that checks of many small files reuse a few.
	Buffers *Buffers
}

// fsys returns the file system companions are opened in, and what to call
// when the inspection ends.
func (o Options) fsys() (fileSystem, func()) {
	if o.RootDir == "" {
		return osFS{}, func() {}
	}
	r := &rootFS{dir: filepath.Clean(o.RootDir), fd: -1}
	return r, r.close
}

// InspectWith is Inspect with options.
func InspectWith(ctx context.Context, path string, o Options) (*Report, error) {
	fsys, done := o.fsys()
	defer done()
	return inspect(ctx, fsys, path, o)
}

// InspectFile is Inspect on a file the caller has opened: f holds size
// bytes and path names it (for messages, and to locate its companions). It
// reads f through ReadAt only and does not close it, so that a caller that
// opened the file with its own confinement rules checks exactly the bytes
// it will copy.
func InspectFile(ctx context.Context, f io.ReaderAt, size int64, path string, o Options) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fsys, done := o.fsys()
	defer done()
	return inspectSource(&source{ctx: ctx, pace: o.Pace, r: readerOf(f, size), size: size, path: path, bufs: o.Buffers}, fsys)
}

// readerOf returns f as the source's reader; an *os.File keeps the mapped
// fast path.
func readerOf(f io.ReaderAt, size int64) io.ReaderAt {
	if of, ok := f.(*os.File); ok {
		return osFile{File: of, n: size}
	}
	return f
}

func inspect(ctx context.Context, fsys fileSystem, path string, o Options) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := fsys.open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return inspectSource(&source{ctx: ctx, pace: o.Pace, r: f, size: f.size(), path: path, bufs: o.Buffers}, fsys)
}

// inspectSource identifies and validates the open file s.
func inspectSource(s *source, fsys fileSystem) (*Report, error) {
	kind, err := detect(s)
	if err != nil {
		return nil, err
	}
	return inspectKind(s, fsys, kind)
}

// inspectKind validates the open file s, whose kind detect found.
func inspectKind(s *source, fsys fileSystem, kind Kind) (*Report, error) {
	path := s.path
	var err error
	rep := &Report{Path: path, Kind: kind, Size: s.size}
	switch kind {
	case SION:
		err = inspectSION(s, fsys, rep)
	case FTIFF:
		err = inspectFTIFF(s, rep)
	case LIME:
		err = inspectLIME(s, fsys, rep)
	case Plain:
		if k, what, ok := claimedKind(path); ok {
			rep.Kind = k
			err = claimError(path, s.size, k, what)
			break
		}
		rep.Ranges = wholeFile(s.size)
		rep.Detail = "plain file"
	}
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			rep.Ranges = nil
			rep.DataBytes = 0
			return rep, err
		}
		return nil, err
	}
	for _, r := range rep.Ranges {
		rep.DataBytes += r.Len
	}
	return rep, nil
}

// detect decides the kind of the file from its content.
func detect(s *source) (Kind, error) {
	var head [8]byte
	n := int64(len(head))
	if s.size < n {
		n = s.size
	}
	if err := s.readAt(head[:n], 0); err != nil {
		return "", err
	}
	switch {
	case n >= 4 && string(head[:4]) == sionMagic:
		return SION, nil
	case n >= 4 && string(head[:4]) == limeMagicBytes:
		return LIME, nil
	}
	if ok, err := looksLikeFTIFF(s); err != nil || ok {
		return FTIFF, err
	}
	if ok, err := looksLikeSION(s); err != nil || ok {
		return SION, err
	}
	if ok, err := looksLikeLIME(s); err != nil || ok {
		return LIME, err
	}
	return Plain, nil
}

// wholeFile returns [0,size) as a range list, empty for an empty file.
func wholeFile(size int64) []Range {
	if size == 0 {
		return nil
	}
	return []Range{{Off: 0, Len: size}}
}

// fileSystem is the part of the file system Inspect uses: the operating
// system's in production, an in-memory one in tests and fuzzing.
type fileSystem interface {
	// open opens a regular file for reading.
	open(path string) (file, error)
	// readDir lists the names in a directory.
	readDir(dir string) ([]string, error)
}

// file is an open regular file of known size.
type file interface {
	io.ReaderAt
	io.Closer
	size() int64
}

// errNotRegular reports a path that is not a regular file.
var errNotRegular = errors.New("not a regular file")

type osFS struct{}

type osFile struct {
	*os.File
	n int64
}

func (f osFile) size() int64 { return f.n }

func (osFS) open(path string) (file, error) {
	// O_NONBLOCK keeps a FIFO put in place of a checkpoint from blocking the
	// open; it has no effect on regular files.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	return osFile{File: f, n: st.Size()}, nil
}

func (osFS) readDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// rootFS opens files beneath the directory dir by the rule of package
// beneath (the one the copy opens its sources by), so that a companion's
// path cannot lead outside the directory the caller confines its sources
// to. dir is opened on first use.
type rootFS struct {
	dir string // cleaned
	fd  int    // dir, once opened; -1 before
	err error  // why dir could not be opened
}

// root returns the descriptor of dir, opening it the first time.
func (r *rootFS) root() (int, error) {
	if r.fd < 0 && r.err == nil {
		fd, _, err := beneath.OpenRoot(r.dir, r.dir)
		if err != nil {
			r.err = err
		}
		r.fd = fd
	}
	return r.fd, r.err
}

// close closes dir if it was opened.
func (r *rootFS) close() {
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

// openBeneath opens path beneath the root with flags. A path lexically
// outside the root is an error wrapping fs.ErrNotExist: a companion out of
// reach is absent.
func (r *rootFS) openBeneath(op, path string, flags int) (*os.File, error) {
	rel, ok := beneath.Rel(r.dir, absPath(path))
	if !ok {
		return nil, &fs.PathError{Op: op, Path: path, Err: fmt.Errorf("%w %s: %w", beneath.ErrOutside, r.dir, fs.ErrNotExist)}
	}
	dirFD, err := r.root()
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	fd, err := beneath.Open(dirFD, rel, flags, 0)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (r *rootFS) open(path string) (file, error) {
	// O_NONBLOCK keeps a FIFO put in place of a companion from blocking
	// the open; it has no effect on regular files.
	f, err := r.openBeneath("open", path, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: errNotRegular}
	}
	return osFile{File: f, n: st.Size()}, nil
}

func (r *rootFS) readDir(dir string) ([]string, error) {
	f, err := r.openBeneath("readdir", dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// absPath returns path made absolute and clean.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}
