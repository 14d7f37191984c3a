package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Check is an inspection that takes the data it hashes from the caller's
// copy of the file instead of reading the file a second time: the caller
// reads every byte once, hands it to Feed, and asks for the verdict with
// Wait once it has read them all.
//
// StartCheck reads the file's structure (headers, chunk tables, LIME
// framing, SciDAC XML, a SIONlib container's whole layout) through the
// ReaderAt before it returns; only the bulk data that is hashed (FTI-FF
// chunks, SciDAC binary records) comes through Feed. Data the inspection
// needs again after it went past, which only the global records of a
// partition master can ask for, is read from the file.
//
// A Check's methods are called from one goroutine; the inspection runs in
// another, which Wait and Close end.
type Check struct {
	cancel context.CancelFunc // nil without a feed
	feed   *feed              // nil when the verdict came from the structure alone
	ready  chan struct{}      // closed once the inspection waits for data or ended
	done   chan struct{}      // closed once the inspection ended
	rep    *Report
	err    error
	closed bool // chunks channel closed
	last   int64
	size   int64
	wait   sync.Once
}

// StartCheck starts inspecting f (size bytes, named path) as InspectFile
// does, with the data it hashes to come through Feed. It returns once the
// inspection has read the file's structure: then Early tells whether the
// verdict is already known (a corrupt structure, or a kind without hashes,
// such as a SIONlib container whose data ranges the copy needs first).
func StartCheck(ctx context.Context, f io.ReaderAt, size int64, path string, o Options) *Check {
	c := &Check{size: size}
	s := &source{ctx: ctx, pace: o.Pace, r: readerOf(f, size), size: size, path: path, bufs: o.Buffers}
	fsys, done := o.fsys()
	// The kind is found here, from the structure alone. A plain file, most
	// of what a flush carries, has nothing to hash: its verdict is in
	// without a goroutine, a context or channels for the inspection (a
	// Check without a feed).
	kind, err := Kind(""), ctx.Err()
	if err == nil {
		kind, err = detect(s)
	}
	if err != nil || kind == Plain {
		defer done()
		if err == nil {
			c.rep, c.err = inspectKind(s, fsys, kind)
		} else {
			c.err = err
		}
		return c
	}
	ctx, c.cancel = context.WithCancel(ctx)
	s.ctx = ctx
	c.ready, c.done = make(chan struct{}), make(chan struct{})
	c.feed = &feed{
		ctx:    ctx,
		chunks: make(chan chunk, feedDepth),
		free:   make(chan []byte, feedDepth+1),
	}
	for range feedDepth + 1 {
		c.feed.free <- nil
	}
	var readyOnce sync.Once
	c.feed.ready = func() { readyOnce.Do(func() { close(c.ready) }) }
	s.feed = c.feed
	go func() {
		// The verdict is in (done) before StartCheck is released (ready).
		defer c.feed.ready()
		defer close(c.done)
		defer done()
		c.rep, c.err = inspectKind(s, fsys, kind)
		c.feed.drain()
	}()
	<-c.ready
	return c
}

// feedDepth is how many pieces Feed may hand over ahead of the inspection.
const feedDepth = 2

// Early returns the verdict if the inspection already reached it without
// any data from Feed; done is false while it waits for data.
func (c *Check) Early() (rep *Report, err error, done bool) {
	if c.feed == nil {
		return c.rep, c.err, true
	}
	select {
	case <-c.done:
		return c.rep, c.err, true
	default:
		return nil, nil, false
	}
}

// errFeedOrder reports pieces handed to Feed out of order.
var errFeedOrder = errors.New("cache: check fed out of order")

// Feed hands the inspection the bytes p of the file at offset off. Pieces
// come in increasing offset order without overlap; bytes of the file never
// fed count as zeros (holes). Feed copies p. It returns the verdict early
// when the inspection has found the file corrupt, so that the caller can
// stop; after a sound verdict it ignores the rest.
func (c *Check) Feed(off int64, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if off < c.last || off+int64(len(p)) > c.size || c.closed {
		return fmt.Errorf("%w: %d bytes at %d after %d, size %d", errFeedOrder, len(p), off, c.last, c.size)
	}
	c.last = off + int64(len(p))
	if c.feed == nil {
		return c.err
	}
	var b []byte
	select {
	case b = <-c.feed.free:
	case <-c.done:
		return c.err
	}
	b = append(b[:0], p...)
	select {
	case c.feed.chunks <- chunk{off: off, p: b}:
		return nil
	case <-c.done:
		return c.err
	}
}

// Wait tells the inspection that every byte has been fed, waits for it to
// end and returns its verdict: the *Report of a sound file, or the error
// Inspect would return.
func (c *Check) Wait() (*Report, error) {
	c.wait.Do(func() {
		if !c.closed {
			c.closed = true
			if c.feed != nil {
				close(c.feed.chunks)
			}
		}
	})
	if c.feed != nil {
		<-c.done
	}
	return c.rep, c.err
}

// Close abandons the inspection if it is still running and waits for it to
// end. It is safe after Wait.
func (c *Check) Close() {
	if c.cancel != nil {
		c.cancel()
	}
	c.Wait()
}

// chunk is a piece of the file handed to Feed.
type chunk struct {
	off int64
	p   []byte
}

// feed is the inspection's side of a Check: the pieces of the file in
// offset order, consumed by source.stream.
type feed struct {
	ctx    context.Context
	chunks chan chunk
	free   chan []byte // buffers to reuse
	ready  func()      // signals that the inspection waits for data
	pos    int64       // every byte before pos was handed out or skipped
	cur    chunk       // unconsumed rest of the current piece
	have   bool        // cur is valid
	eof    bool        // chunks is closed and drained
	zeros  []byte
}

// next makes sure cur holds the piece at or after pos, or eof is set.
func (f *feed) next() error {
	if f.have || f.eof {
		return nil
	}
	f.ready()
	select {
	case c, ok := <-f.chunks:
		if !ok {
			f.eof = true
			return nil
		}
		f.cur, f.have = c, true
		return nil
	case <-f.ctx.Done():
		return f.ctx.Err()
	}
}

// advance consumes k bytes at pos.
func (f *feed) advance(k int64, inChunk bool) {
	f.pos += k
	if !inChunk {
		return
	}
	f.cur.p = f.cur.p[k:]
	f.cur.off += k
	if len(f.cur.p) == 0 {
		f.free <- f.cur.p[:0]
		f.cur, f.have = chunk{}, false
	}
}

// stream is source.stream over the fed pieces: [off,off+n) goes to fn in
// order. Bytes before pos, which went by already, are read from the file.
func (f *feed) stream(s *source, off, n int64, fn func([]byte) error) error {
	end := off + n
	for off < end {
		if off < f.pos {
			k := min(end, f.pos) - off
			if err := s.streamDirect(off, k, fn); err != nil {
				return err
			}
			off += k
			continue
		}
		if err := f.next(); err != nil {
			return err
		}
		// The segment starting at pos: fed data, or zeros up to the next
		// piece or the end of the file.
		segEnd, inChunk := s.size, false
		if f.have {
			if f.cur.off <= f.pos {
				segEnd, inChunk = f.cur.off+int64(len(f.cur.p)), true
			} else {
				segEnd = f.cur.off
			}
		}
		if off > f.pos {
			f.advance(min(off, segEnd)-f.pos, inChunk)
			continue
		}
		k := min(end, segEnd) - off
		var p []byte
		if inChunk {
			p = f.cur.p[:k]
		} else {
			if f.zeros == nil {
				f.zeros = make([]byte, min(streamBufSize, s.size))
			}
			k = min(k, int64(len(f.zeros)))
			p = f.zeros[:k]
		}
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
		f.advance(k, inChunk)
		off += k
	}
	return nil
}

// drain returns the buffers of pieces the inspection did not need, so that
// Feed never blocks on an inspection that has ended.
func (f *feed) drain() {
	if f.have {
		f.free <- f.cur.p[:0]
		f.have = false
	}
}
