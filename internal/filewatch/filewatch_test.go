package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wait reports whether a change arrives within d.
func wait(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func TestWatchSeesWritesAndRecreation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "transfer.scrinfo")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An hour's poll: only notification can deliver these in time.
	ch := Watch(ctx, path, time.Hour, nil)
	steps := []struct {
		name string
		do   func() error
	}{
		{"created", func() error { return os.WriteFile(path, []byte("a"), 0o600) }},
		{"written", func() error { return os.WriteFile(path, []byte("bb"), 0o600) }},
		{"removed", func() error { return os.Remove(path) }},
		{"replaced by rename", func() error {
			tmp := filepath.Join(dir, "new")
			if err := os.WriteFile(tmp, []byte("c"), 0o600); err != nil {
				return err
			}
			return os.Rename(tmp, path)
		}},
	}
	for _, s := range steps {
		for len(ch) > 0 {
			<-ch
		}
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		if !wait(ch, 10*time.Second) {
			t.Fatalf("%s: no change reported", s.name)
		}
	}
}

func TestPollAloneSeesChanges(t *testing.T) {
	// A path whose directory does not exist yet cannot be watched: the
	// poll alone must report the file once it appears.
	dir := filepath.Join(t.TempDir(), "later")
	path := filepath.Join(dir, "transfer.scrinfo")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var warned error
	ch := Watch(ctx, path, 20*time.Millisecond, func(_ string, err error) { warned = err })
	if warned == nil {
		t.Fatal("no warning that notification is unavailable")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !wait(ch, 10*time.Second) {
		t.Fatal("the poll did not report the new file")
	}
}

// TestPollDecision: the metadata is polled only where inotify cannot be
// trusted.
func TestPollDecision(t *testing.T) {
	tests := []struct {
		name   string
		notify bool
		fsType int64
		err    error
		want   bool
	}{
		{"ext4", true, unix.EXT4_SUPER_MAGIC, nil, false},
		{"xfs", true, unix.XFS_SUPER_MAGIC, nil, false},
		{"tmpfs (/dev/shm)", true, unix.TMPFS_MAGIC, nil, false},
		{"btrfs", true, unix.BTRFS_SUPER_MAGIC, nil, false},
		{"overlayfs", true, unix.OVERLAYFS_SUPER_MAGIC, nil, false},
		{"NFS", true, unix.NFS_SUPER_MAGIC, nil, true},
		{"CIFS", true, unix.CIFS_SUPER_MAGIC, nil, true},
		{"SMB2", true, unix.SMB2_SUPER_MAGIC, nil, true},
		{"CephFS", true, unix.CEPH_SUPER_MAGIC, nil, true},
		{"FUSE", true, unix.FUSE_SUPER_MAGIC, nil, true},
		{"9p", true, unix.V9FS_MAGIC, nil, true},
		{"Lustre", true, 0x0bd00bd0, nil, true},
		{"GPFS", true, 0x47504653, nil, true},
		{"BeeGFS", true, 0x19830326, nil, true},
		{"GFS2", true, 0x01161970, nil, true},
		{"no inotify on ext4", false, unix.EXT4_SUPER_MAGIC, nil, true},
		{"directory missing", true, 0, unix.ENOENT, true},
	}
	for _, tc := range tests {
		if got, why := decide(tc.notify, tc.fsType, tc.err); got != tc.want {
			t.Errorf("%s: poll %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
	// The real file systems at hand.
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if poll, why := Polls("/dev/shm", true); poll {
			t.Errorf("/dev/shm: polls (%s)", why)
		}
	}
	if poll, _ := Polls(filepath.Join(t.TempDir(), "missing"), true); !poll {
		t.Error("a directory that does not exist yet is not polled")
	}
}

// TestWatchSurvivesDirectoryRemoval: when the watched directory is removed
// and made again, inotify's watch on it is gone; the poll takes over and the
// new file is still reported.
func TestWatchSurvivesDirectoryRemoval(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctl")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "transfer.scrinfo")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := Watch(ctx, path, 20*time.Millisecond, nil)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if !wait(ch, 10*time.Second) {
		t.Fatal("the directory's removal was not reported")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !wait(ch, 10*time.Second) {
		t.Fatal("the file in the recreated directory was not reported")
	}
}
