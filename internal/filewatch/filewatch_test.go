package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
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
