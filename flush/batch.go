package flush

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Batch lets several copies share the last step of making them durable:
// a copy whose Job names a Batch fsyncs its data, publishes it under its
// final name and hands its directory to the Batch instead of fsyncing it
// and calling commit; Sync then fsyncs each directory once, after which
// every copy completed into the Batch is durable under its name and the
// caller records them all in one update. A Batch may be shared by copies
// running concurrently.
type Batch struct {
	mu   sync.Mutex
	dirs []batchDir
}

type batchDir struct {
	fd       int
	dev, ino uint64
	name     string
}

// keep makes the Batch fsync the directory open as fd (it keeps a
// duplicate of fd, once per directory); false means the caller must fsync
// it itself.
func (b *Batch) keep(fd int, name string) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.dirs {
		if d.dev == st.Dev && d.ino == st.Ino {
			return true
		}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false
	}
	b.dirs = append(b.dirs, batchDir{fd: dup, dev: st.Dev, ino: st.Ino, name: name})
	return true
}

// Dirs returns the number of directories the Batch holds.
func (b *Batch) Dirs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dirs)
}

// Sync fsyncs each directory once and releases them. Only when it returns
// nil are the copies completed into the Batch durable under their names.
func (b *Batch) Sync() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first error
	for _, d := range b.dirs {
		if err := fsync(d.fd); err != nil && first == nil {
			first = fmt.Errorf("cannot fsync directory %s: %w", d.name, err)
		}
		_ = unix.Close(d.fd)
	}
	b.dirs = nil
	return first
}
