// Package fusetest serves a directory through FUSE as a test stand-in for
// a parallel file system: each mount plays one compute node's client, and
// the options give it the two properties of a real PFS that a local file
// system lacks. Locks can be cluster-wide, node-local (BeeGFS by default,
// NFS with local_lock, Lustre with -o localflock) or missing (Lustre with
// -o noflock, which answers ENOSYS); and the bandwidth can be finite and
// shared between mounts, so that writers queue as they do on a busy
// storage target. It is for tests and benchmarks only.
package fusetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// LockMode says how a mount answers flock and fcntl locks.
type LockMode int

const (
	// KernelLocks forwards every lock to the backing file, so locks taken
	// through different mounts exclude each other: a cluster-wide lock.
	KernelLocks LockMode = iota
	// NodeLocalLocks leaves locks to the kernel's FUSE inode of each
	// mount: they exclude processes using the same mount (one node) and
	// not those using another mount of the same directory.
	NodeLocalLocks
	// NoLocks answers every flock and fcntl lock request with ENOSYS.
	NoLocks
)

// String names the mode as the fusemount command's -locks flag does.
func (m LockMode) String() string {
	switch m {
	case KernelLocks:
		return "kernel"
	case NodeLocalLocks:
		return "nodelocal"
	case NoLocks:
		return "none"
	}
	return fmt.Sprintf("LockMode(%d)", int(m))
}

// ParseLockMode is the inverse of String.
func ParseLockMode(s string) (LockMode, error) {
	for _, m := range []LockMode{KernelLocks, NodeLocalLocks, NoLocks} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("lock mode %q: want kernel, nodelocal or none", s)
}

// Options configure one mount.
type Options struct {
	Locks LockMode
	// Bucket, when not nil, serves every write of the mount. Mounts that
	// share a Bucket share its bandwidth.
	Bucket *Bucket
	// Stall, when not nil, delays every fsync of the mount's files.
	// Mounts that share a Stall stall together.
	Stall *Stall
}

// Stall is a storage target that stalls: each fsync returns its delay
// after it began, the delay in force while it waits (Set wakes the
// waiting fsyncs to look again, so that setting 0 ends every stall). It
// plays a PFS client whose fsync hangs on a busy or failing server.
type Stall struct {
	mu      sync.Mutex
	delay   time.Duration
	changed chan struct{} // closed and replaced by Set
	waiting int           // fsyncs waiting now
	stalled int           // fsyncs that waited, in all
}

// NewStall returns a Stall delaying each fsync by delay.
func NewStall(delay time.Duration) *Stall {
	return &Stall{delay: delay, changed: make(chan struct{})}
}

// Set changes the delay, for the fsyncs waiting now as well.
func (s *Stall) Set(delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = delay
	close(s.changed)
	s.changed = make(chan struct{})
}

// Waiting returns how many fsyncs are waiting now, and how many waited
// (or are waiting) since the Stall was made.
func (s *Stall) Waiting() (now, all int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting, s.stalled
}

// wait blocks an fsync that began at began until its delay has passed or
// ctx ends (the caller was interrupted).
func (s *Stall) wait(ctx context.Context, began time.Time) syscall.Errno {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	s.waiting++
	s.stalled++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		left, changed := time.Until(began.Add(s.delay)), s.changed
		s.mu.Unlock()
		if left <= 0 {
			return 0
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
			return 0
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return syscall.EINTR
		}
	}
}

// bucketDepth is the short pause between one client's requests that the
// target absorbs: a real PFS client keeps several requests in flight, so
// its target never idles between them, while a FUSE mount serves one
// file's writes one at a time with about a millisecond of its own between
// them; without a depth one writer alone would get less than the rate.
// Over any interval T the bucket serves at most rate × (T + bucketDepth).
const bucketDepth = 2 * time.Millisecond

// Bucket is a storage target of finite bandwidth serving writes in
// arrival order: a write of n bytes completes n/rate after the later of
// its arrival and the completion of the write before it, less the idle
// time before its arrival up to bucketDepth. The waiting writer sees the
// queueing delay a busy target adds.
type Bucket struct {
	rate float64 // bytes per second

	mu   sync.Mutex
	next time.Time // when the target is free again
}

// NewBucket returns a Bucket of bytesPerSec (> 0).
func NewBucket(bytesPerSec float64) *Bucket {
	return &Bucket{rate: bytesPerSec}
}

// Rate is the bucket's bandwidth in bytes per second.
func (b *Bucket) Rate() float64 { return b.rate }

// reserve books n bytes at now and returns when they are served.
func (b *Bucket) reserve(now time.Time, n int) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := now.Add(-bucketDepth)
	if b.next.After(start) {
		start = b.next
	}
	b.next = start.Add(time.Duration(float64(n) / b.rate * float64(time.Second)))
	return b.next
}

// book books n bytes arriving now and returns when they are served; the
// zero time for a nil Bucket or no bytes.
func (b *Bucket) book(n int) time.Time {
	if b == nil || n == 0 {
		return time.Time{}
	}
	return b.reserve(time.Now(), n)
}

// waitUntil blocks until done, or ctx ends.
func waitUntil(ctx context.Context, done time.Time) syscall.Errno {
	d := time.Until(done)
	if d <= 0 {
		return 0
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

// Server is one mounted file system.
type Server struct {
	srv        *fuse.Server
	mountpoint string
}

// Mount serves backing at mountpoint (an existing empty directory) until
// Close. Entries and attributes are not cached by the kernel, so every
// mount sees the others' changes at once, as on a coherent PFS client.
func Mount(backing, mountpoint string, opts Options) (*Server, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("fusetest: backing directory %s: %w", backing, err)
	}
	zero := time.Duration(0)
	fsOpts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			AllowOther:  os.Geteuid() == 0,
			FsName:      backing,
			Name:        "fusetest",
			DirectMount: true,
			EnableLocks: opts.Locks != NodeLocalLocks,
			MaxWrite:    1 << 20,
			// The kernel checks permissions from the attributes, as a
			// PFS client does: the server itself runs as root.
			Options: []string{"default_permissions"},
		},
	}
	wrapped := &node{LoopbackNode: root.(*fs.LoopbackNode), opts: opts}
	wrapped.RootData.RootNode = wrapped
	srv, err := fs.Mount(mountpoint, wrapped, fsOpts)
	if err != nil {
		return nil, fmt.Errorf("fusetest: mounting %s at %s: %w", backing, mountpoint, err)
	}
	return &Server{srv: srv, mountpoint: mountpoint}, nil
}

// Close unmounts the file system, retrying while it is busy for up to 10 s.
func (s *Server) Close() error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err = s.srv.Unmount(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // retry pacing: the mount is busy
	}
	if err != nil {
		return fmt.Errorf("fusetest: unmounting %s: %w", s.mountpoint, err)
	}
	s.srv.Wait()
	return nil
}

// node is a loopback node whose files carry the mount's options.
type node struct {
	*fs.LoopbackNode
	opts Options
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeTmpfiler    = (*node)(nil)
)

// WrapChild gives every node of the tree the mount's options.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), opts: n.opts}
}

// Open wraps the loopback file.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(fh), fl, errno
}

// Tmpfile answers ENOSYS, which the kernel turns into EOPNOTSUPP for
// O_TMPFILE: the loopback cannot give such a file a name later (LINK
// carries no descriptor), and network file systems' FUSE clients, such as
// GlusterFS's, have no O_TMPFILE either.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOSYS
}

// Create wraps the loopback file.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, n.wrap(fh), fl, errno
}

func (n *node) wrap(fh fs.FileHandle) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	return &file{LoopbackFile: lf, opts: n.opts}
}

// file is a loopback file whose writes go through the mount's Bucket and
// whose locks follow its LockMode.
type file struct {
	*fs.LoopbackFile
	opts Options
}

// PassthroughFd keeps the kernel from doing the file's I/O on the backing
// file directly: every read and write goes through the server, as on a
// network file system.
func (f *file) PassthroughFd() (int, bool) { return -1, false }

// Write books the bucket, writes, and returns once the bucket has served
// the bytes: the write to the backing directory is part of the service
// time, as a storage target's own write is, so one writer alone is served
// at the bucket's rate.
func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	done := f.opts.Bucket.book(len(data))
	n, errno := f.LoopbackFile.Write(ctx, data, off)
	if errno != 0 {
		return n, errno
	}
	return n, waitUntil(ctx, done)
}

// Writev is Write for a vector of buffers.
func (f *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	size := 0
	for _, d := range data {
		size += len(d)
	}
	done := f.opts.Bucket.book(size)
	n, errno := f.LoopbackFile.Writev(ctx, data, off)
	if errno != 0 {
		return n, errno
	}
	return n, waitUntil(ctx, done)
}

// Fsync waits out the mount's Stall, then syncs.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := f.opts.Stall.wait(ctx, time.Now()); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}

// Getlk answers ENOSYS under NoLocks.
func (f *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	if f.opts.Locks == NoLocks {
		return syscall.ENOSYS
	}
	return f.LoopbackFile.Getlk(ctx, owner, lk, flags, out)
}

// Setlk answers ENOSYS under NoLocks.
func (f *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	if f.opts.Locks == NoLocks {
		return syscall.ENOSYS
	}
	return f.LoopbackFile.Setlk(ctx, owner, lk, flags)
}

// Setlkw answers ENOSYS under NoLocks.
func (f *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	if f.opts.Locks == NoLocks {
		return syscall.ENOSYS
	}
	return f.LoopbackFile.Setlkw(ctx, owner, lk, flags)
}

// Available reports why FUSE cannot be mounted here, or nil if it can:
// the device must exist and the caller must be root (mounts are direct).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("fusetest: mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("fusetest: %w", err)
	}
	return nil
}
