package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// source is an open file being inspected. It reads through one streaming
// buffer, allocated on first use and never larger than the file.
type source struct {
	ctx  context.Context
	pace func(context.Context) error // Options.Pace, nil if unset
	r    io.ReaderAt
	size int64
	path string
	buf  []byte
	// feed, when set, supplies the data that stream hands out: the bytes
	// of this file as the caller copies them, so they are read only once.
	feed *feed
	// fti caches probeFTIFF's answer: detection and validation both ask.
	fti *ftiProbe
	// bufs lends the probe its buffer (Options.Buffers); nil allocates.
	bufs *Buffers
}

// fail returns a FormatError about this file.
func (s *source) fail(kind Kind, code string, off int64, format string, args ...any) *FormatError {
	return &FormatError{Path: s.path, Kind: kind, Code: code, Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// paced calls the caller's pacing hook, if any.
func (s *source) paced() error {
	if s.pace == nil {
		return nil
	}
	return s.pace(s.ctx)
}

// readAt fills p from offset off. The caller has checked that the range lies
// inside the file, so a short read means the file changed underneath.
func (s *source) readAt(p []byte, off int64) error {
	n, err := s.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("cache: read %s: %d bytes at offset %d: %w", s.path, len(p), off, err)
}

// view returns [off, off+n) of the file, which the caller has checked lies
// inside it, and a release to call once done with it: a slice of the
// caller's bytes when the file came as bytes already read (see byteser),
// else a buffer lent by bufs, read into.
func (s *source) view(off, n int64) ([]byte, func(), error) {
	if b, ok := s.r.(byteser); ok {
		if p := b.Bytes(); int64(len(p)) >= off+n {
			return p[off : off+n], func() {}, nil
		}
	}
	w := s.bufs.get(n)
	if err := s.readAt(w, off); err != nil {
		s.bufs.put(w)
		return nil, nil, err
	}
	return w, func() { s.bufs.put(w) }, nil
}

// byteser is a reader of a file read whole already, which hands over its
// bytes to look at without a copy (flush's reader of a small source).
type byteser interface {
	Bytes() []byte
}

// Ranges of at least mmapMin bytes of an operating-system file are hashed
// straight from the page cache through a read-only mapping of up to
// mmapWindow bytes at a time, which saves copying them into the buffer;
// shorter ranges, and files that cannot be mapped, are read.
const (
	mmapMin    = 64 << 10
	mmapWindow = 64 << 20
)

// stream hands [off, off+n) to fn in order, in pieces of at most
// streamBufSize bytes. It checks for cancellation before every piece. fn
// must not keep the slice.
func (s *source) stream(off, n int64, fn func([]byte) error) error {
	if s.feed != nil {
		return s.feed.stream(s, off, n, fn)
	}
	return s.streamDirect(off, n, fn)
}

// streamDirect is stream from the file itself.
func (s *source) streamDirect(off, n int64, fn func([]byte) error) error {
	if f, ok := s.r.(osFile); ok && n >= mmapMin {
		return s.streamMapped(f.File, off, n, fn)
	}
	return s.streamRead(off, n, fn)
}

// streamRead is stream through the reusable buffer.
func (s *source) streamRead(off, n int64, fn func([]byte) error) error {
	if s.buf == nil {
		s.buf = make([]byte, min(streamBufSize, s.size))
	}
	for n > 0 {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		p := s.buf
		if int64(len(p)) > n {
			p = p[:n]
		}
		if err := s.readAt(p, off); err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
		if err := s.paced(); err != nil {
			return err
		}
		off += int64(len(p))
		n -= int64(len(p))
	}
	return nil
}

// streamMapped is stream through read-only mappings of f. A file that cannot
// be mapped is read instead.
func (s *source) streamMapped(f *os.File, off, n int64, fn func([]byte) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return s.streamRead(off, n, fn)
	}
	page := int64(os.Getpagesize())
	for n > 0 {
		start := off &^ (page - 1)
		length := min(off-start+n, mmapWindow)
		var m []byte
		var merr error
		if err := rc.Control(func(fd uintptr) {
			m, merr = unix.Mmap(int(fd), start, int(length), unix.PROT_READ, unix.MAP_SHARED)
		}); err != nil || merr != nil {
			return s.streamRead(off, n, fn)
		}
		_ = unix.Madvise(m, unix.MADV_WILLNEED) // start readahead if not cached
		err := s.consumeMapped(m[off-start:], off, fn)
		if uerr := unix.Munmap(m); err == nil && uerr != nil {
			err = fmt.Errorf("cache: unmap %s: %w", s.path, uerr)
		}
		if err != nil {
			return err
		}
		n -= start + length - off
		off = start + length
	}
	return nil
}

// consumeMapped hands the mapped bytes m, which start at file offset off, to
// fn. A file that shrinks meanwhile makes the access fault; the fault is
// turned into an error instead of killing the process.
func (s *source) consumeMapped(m []byte, off int64, fn func([]byte) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("cache: read %s: file shrank while being read (fault in the piece at offset %d): %w", s.path, off, io.ErrUnexpectedEOF)
		}
	}()
	for len(m) > 0 {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		p := m[:min(len(m), streamBufSize)]
		if err := fn(p); err != nil {
			return err
		}
		if err := s.paced(); err != nil {
			return err
		}
		m = m[len(p):]
		off += int64(len(p))
	}
	return nil
}

// seqReader reads a region of a file front to back in small items (table
// entries, record fields) through a buffer of at most 64 KiB.
type seqReader struct {
	s        *source
	off, end int64 // file offset of the next unbuffered byte, end of region
	buf      []byte
	pos, lim int // unread bytes are buf[pos:lim]
}

const seqBufSize = 64 << 10

func newSeqReader(s *source, off, end int64) *seqReader {
	size := int64(seqBufSize)
	if end-off < size {
		size = end - off
	}
	return &seqReader{s: s, off: off, end: end, buf: make([]byte, size)}
}

// offset returns the file offset of the next item.
func (r *seqReader) offset() int64 { return r.off - int64(r.lim-r.pos) }

// next returns the next n bytes (n at most the buffer size); the slice is
// valid until the following call. The caller has checked that the region
// holds them.
func (r *seqReader) next(n int) ([]byte, error) {
	if r.lim-r.pos < n {
		if n > len(r.buf) || int64(r.lim-r.pos)+r.end-r.off < int64(n) {
			return nil, fmt.Errorf("cache: read %s: %d bytes at offset %d: %w", r.s.path, n, r.offset(), io.ErrUnexpectedEOF)
		}
		if err := r.s.ctx.Err(); err != nil {
			return nil, err
		}
		copy(r.buf, r.buf[r.pos:r.lim])
		r.lim -= r.pos
		r.pos = 0
		fill := int64(len(r.buf) - r.lim)
		if fill > r.end-r.off {
			fill = r.end - r.off
		}
		if err := r.s.readAt(r.buf[r.lim:r.lim+int(fill)], r.off); err != nil {
			return nil, err
		}
		r.off += fill
		r.lim += int(fill)
	}
	p := r.buf[r.pos : r.pos+n]
	r.pos += n
	return p, nil
}
