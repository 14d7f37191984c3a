package test

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/scr-transferd/scr-transferd/internal/fusetest"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// A write-back cache in front of a slow storage target, as a PFS client
// with client-side caching (Lustre, GPFS) gives one: writes return at
// once, and fsync waits until every byte written through the file since
// its last fsync has drained at the target's rate. internal/fusetest
// serves each write at its bucket's rate instead, so that its fsync is
// quick; the STOP test needs the slow fsync.

// slowSyncMount serves backing at mountpoint through FUSE, each fsync
// draining the bytes written since at bytesPerSec; it is unmounted when
// the test ends. It fails the test where FUSE is not available and CI
// requires it (CI=true), else skips.
func slowSyncMount(t *testing.T, backing, mountpoint string, bytesPerSec float64) {
	t.Helper()
	if err := fusetest.Available(); err != nil {
		testenv.Absent(t, "%v", err)
	}
	must(t, os.MkdirAll(backing, 0o755))
	must(t, os.MkdirAll(mountpoint, 0o755))
	root, err := fs.NewLoopbackRoot(backing)
	must(t, err)
	zero := time.Duration(0)
	n := &slowNode{LoopbackNode: root.(*fs.LoopbackNode), rate: bytesPerSec}
	n.RootData.RootNode = n
	srv, err := fs.Mount(mountpoint, n, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{AllowOther: true, FsName: backing, Name: "slowsync", DirectMount: true,
			MaxWrite: 1 << 20, Options: []string{"default_permissions"}},
	})
	must(t, err)
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); srv.Unmount() != nil && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond) // retry pacing: the mount is busy
		}
		srv.Wait()
	})
}

// slowNode is a loopback node whose files drain slowly on fsync.
type slowNode struct {
	*fs.LoopbackNode
	rate float64
}

func (n *slowNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &slowNode{LoopbackNode: ops.(*fs.LoopbackNode), rate: n.rate}
}

func (n *slowNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(fh), fl, errno
}

func (n *slowNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, n.wrap(fh), fl, errno
}

func (n *slowNode) wrap(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return &slowFile{LoopbackFile: lf, rate: n.rate}
	}
	return fh
}

// slowFile counts the bytes written through it since its last fsync.
type slowFile struct {
	*fs.LoopbackFile
	rate  float64
	mu    sync.Mutex
	dirty int
}

func (f *slowFile) PassthroughFd() (int, bool) { return -1, false }

func (f *slowFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	f.dirty += len(data)
	f.mu.Unlock()
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *slowFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.mu.Lock()
	n := f.dirty
	f.dirty = 0
	f.mu.Unlock()
	// The storage target writing the cached bytes: a device's time, not
	// a test waiting for a condition.
	t := time.NewTimer(time.Duration(float64(n) / f.rate * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return syscall.EINTR
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}
