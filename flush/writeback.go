package flush

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Writeback starts the write-back of small copies while a batch is still
// being copied, so that the disk writes the first files while the streams
// copy the next, instead of waiting idle until a whole group is handed to
// Batch.Sync: each time it has been told of writebackEvery more bytes of
// small held copies, it calls syncfs(2) on their file system in a
// goroutine of its own, one at a time. A copy of 1 MiB or more needs none: its write-back
// is started when it is held (see kickHeld). 2000 copies of 64 KiB on an
// ext4 took 244 ms with a write-back every 8 MiB against 287 ms without
// (medians of four).
//
// It is a hint and nothing more. Durability is still Batch.Sync's: its
// syncfs, through a directory the Batch opened before any of its copies
// was created, reports every write-back error raised since (each open
// file has its own errseq cursor), so the syncfs here, through a
// duplicate of a partial copy's descriptor, hides none of them. It is
// only used where Batch.Sync would use syncfs (a local file system that
// syncfs covers, see syncfsCovers), and only while no BW or PERCENT limit
// is set: its work is not paced.
//
// A Writeback may be shared by the Batches of several groups; Wait waits
// for the syncfs under way.
type Writeback struct {
	every  int64              // writebackEvery; other values in tests
	syncfs func(fd int) error // unix.Syncfs; counted in tests

	mu     sync.Mutex
	unsent int64 // bytes held since the last syncfs began
	busy   bool  // a syncfs is under way
	wg     sync.WaitGroup
}

// writebackEvery is how many bytes of small held copies a Writeback lets
// accumulate before it starts a syncfs: 4 MiB and 16 MiB did no better.
const writebackEvery = 8 << 20

// NewWriteback returns a Writeback for the Batches of one batch.
func NewWriteback() *Writeback {
	return &Writeback{every: writebackEvery, syncfs: unix.Syncfs}
}

// held is told of a small copy handed to a Batch: tmp is its partial copy,
// size its bytes.
func (w *Writeback) held(tmp int, size int64) {
	if w == nil || w.every <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unsent += size
	if w.busy || w.unsent < w.every || !syncfsCovers(tmp) || !syncfsReportsErrors() {
		return
	}
	fd, err := unix.FcntlInt(uintptr(tmp), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	w.unsent, w.busy = 0, true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		_ = w.syncfs(fd) // a hint: errors are Batch.Sync's to report
		_ = unix.Close(fd)
		w.mu.Lock()
		w.busy = false
		w.mu.Unlock()
	}()
}

// Wait waits for the syncfs under way, if any.
func (w *Writeback) Wait() {
	if w != nil {
		w.wg.Wait()
	}
}
