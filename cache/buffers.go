package cache

import "sync"

// Buffers lends inspections the buffer into which the FTI-FF probe reads
// the end of a file (up to 64 KiB and a file meta). Every file is probed,
// plain ones too, so a daemon flushing thousands of small files would
// otherwise allocate, zero and fault in a fresh buffer for each, and
// collect them all again: a sixth of the daemon's CPU time when flushing
// 2000 files of 64 KiB. It keeps at most maxFreeBuffers (1 MiB) between
// inspections: as many as run at once in a daemon, whose copy streams are
// few. The zero value is ready to use and safe for concurrent inspections;
// a nil *Buffers allocates for each.
type Buffers struct {
	mu   sync.Mutex
	free [][]byte // each probeBufSize long
}

const (
	// probeBufSize is the most the probe reads.
	probeBufSize = ftiScanWindow + ftiMetaSize
	// maxFreeBuffers bounds the buffers kept for reuse.
	maxFreeBuffers = 16
)

// get returns n bytes, n ≤ probeBufSize, of unspecified content.
func (b *Buffers) get(n int64) []byte {
	if b == nil {
		return make([]byte, n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := len(b.free); k > 0 {
		p := b.free[k-1]
		b.free[k-1] = nil
		b.free = b.free[:k-1]
		return p[:n]
	}
	return make([]byte, probeBufSize)[:n]
}

// put takes back a buffer from get; the caller no longer refers to it.
func (b *Buffers) put(p []byte) {
	if b == nil || cap(p) != probeBufSize {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.free) < maxFreeBuffers {
		b.free = append(b.free, p[:cap(p)])
	}
}
