package flush

import (
	"errors"
	"sync"
)

// fileKey names a file by device and inode.
type fileKey struct{ dev, ino uint64 }

// abandonedSyncs lists the partial copies whose fsync a stopped copy
// stopped waiting for: the fsync goes on in a goroutine that holds the
// partial copy's descriptor, and with it its lock, until it returns. A
// later copy of the same DESTINATION that finds the lock taken is then
// told that the holder is this process's own fsync, not another writer.
type abandonedSyncs struct {
	mu    sync.Mutex
	files map[fileKey]int // partial copy → fsyncs in flight
}

// add notes an fsync of k in flight.
func (a *abandonedSyncs) add(k fileKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files == nil {
		a.files = make(map[fileKey]int)
	}
	a.files[k]++
}

// done notes the end of an fsync of k noted by add.
func (a *abandonedSyncs) done(k fileKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files[k]--; a.files[k] <= 0 {
		delete(a.files, k)
	}
}

// has tells whether an fsync of k is in flight.
func (a *abandonedSyncs) has(k fileKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.files[k] > 0
}

// The Throttle is the one object every copy and Batch of a process
// shares, so it keeps the process's abandoned fsyncs. Without a Throttle
// none is known, and a lock taken by one reads as another writer's.

// syncAbandoned notes that a copy stopped waiting for an fsync of k.
func (t *Throttle) syncAbandoned(k fileKey) {
	if t != nil {
		t.abandoned.add(k)
	}
}

// syncReturned notes that an fsync noted by syncAbandoned returned and
// its descriptor was closed.
func (t *Throttle) syncReturned(k fileKey) {
	if t != nil {
		t.abandoned.done(k)
	}
}

// syncInFlight tells whether an abandoned fsync of k has not returned yet.
func (t *Throttle) syncInFlight(k fileKey) bool {
	return t != nil && t.abandoned.has(k)
}

// ErrPartialSyncing: the partial copy's lock is held by this process's own
// fsync of it, which a stopped copy stopped waiting for (the destination
// is slow or stalled); the lock is released when that fsync returns, and
// the copy is tried again meanwhile. No other writer is involved.
var ErrPartialSyncing = errors.New("the partial copy is still locked by this daemon's own fsync of it, which a stopped copy left running; it is released once the destination completes that fsync")
