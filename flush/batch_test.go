package flush

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestBatchHoldsUntilSync: a copy completed into a Batch is checked but
// neither published nor recorded: commit is never called with the size,
// DESTINATION does not exist before Sync, and each destination directory
// is held once. After Sync every copy is durable under its name, with no
// partial copy left. Both ways of making the data durable are run.
func TestBatchHoldsUntilSync(t *testing.T) {
	for _, syncEach := range []bool{false, true} {
		t.Run(fmt.Sprintf("syncEach=%v", syncEach), func(t *testing.T) {
			dir := t.TempDir()
			c := NewCopier(nil, Options{DropCache: true})
			b := NewBatch(nil, syncEach)
			data := []byte("checkpoint bytes")
			var dsts []string
			for i, d := range []string{"a", "a", "b/c"} {
				src := filepath.Join(dir, fmt.Sprintf("src%d", i))
				if err := os.WriteFile(src, data, 0o600); err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(dir, "pfs", d, fmt.Sprintf("f%d", i))
				var commits []int64
				res, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Batch: b},
					func(n int64, _ uint32) error { commits = append(commits, n); return nil })
				if err != nil || !res.Held || res.Complete || res.Written != 0 {
					t.Fatalf("%s: %+v, %v: want held, not complete, nothing durable yet", dst, res, err)
				}
				if len(commits) != 0 {
					t.Errorf("%s: commits %v: the completion is the caller's to record", dst, commits)
				}
				if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s published before the batch made it durable (%v)", dst, err)
				}
				if _, err := os.Stat(TempPath(dst)); err != nil {
					t.Errorf("partial copy of %s: %v", dst, err)
				}
				dsts = append(dsts, dst)
			}
			if n, h := b.Dirs(), b.Held(); n != 2 || h != 3 {
				t.Errorf("the batch holds %d directories and %d copies, want 2 (each once) and 3", n, h)
			}
			if err := b.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, dst := range dsts {
				if err := b.Err(dst); err != nil {
					t.Errorf("%s: %v", dst, err)
				}
				if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
					t.Errorf("%s not published", dst)
				}
				if _, err := os.Stat(TempPath(dst)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("partial copy of %s left behind (%v)", dst, err)
				}
			}
			if n, h := b.Dirs(), b.Held(); n != 0 || h != 0 {
				t.Errorf("%d directories and %d copies left after Sync", n, h)
			}
			if err := b.Err(filepath.Join(dir, "pfs", "never")); err == nil {
				t.Error("Err of a destination never held is nil")
			}
		})
	}
}

// TestBatchChecksAtPublishing: what happens to a held copy before Sync
// publishes it is seen then, as a lone copy sees it before its rename: a
// source replaced by a rename, a source rewritten in place, a partial copy
// removed. None of them is published; the others are.
func TestBatchChecksAtPublishing(t *testing.T) {
	dir := t.TempDir()
	c := NewCopier(nil, Options{})
	b := NewBatch(nil, false)
	data := []byte("checkpoint bytes")
	type file struct{ src, dst string }
	var fs []file
	for i := range 4 {
		f := file{filepath.Join(dir, fmt.Sprintf("src%d", i)), filepath.Join(dir, "pfs", fmt.Sprintf("f%d", i))}
		if err := os.WriteFile(f.src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if res, err := c.Copy(context.Background(), Job{Src: f.src, Dst: f.dst, Size: int64(len(data)), Batch: b}, nil); err != nil || !res.Held {
			t.Fatalf("%+v, %v", res, err)
		}
		fs = append(fs, f)
	}
	// 0 stays; 1 is replaced by a rename; 2 is rewritten in place, same
	// size; the partial copy of 3 is removed.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("other checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, fs[1].src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fs[2].src, []byte("CHECKPOINT BYTES"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(TempPath(fs[3].dst)); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background()); err == nil {
		t.Error("Sync returned nil with three copies refused")
	}
	if err := b.Err(fs[0].dst); err != nil {
		t.Errorf("the untouched copy: %v", err)
	}
	for i, want := range []error{nil, ErrSourceReplaced, ErrSourceReplaced, ErrDestinationChanged} {
		err := b.Err(fs[i].dst)
		if want == nil {
			if got, _ := os.ReadFile(fs[i].dst); !bytes.Equal(got, data) {
				t.Errorf("%s not published", fs[i].dst)
			}
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("copy %d: %v, want %v", i, err, want)
		}
		if _, serr := os.Stat(fs[i].dst); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("copy %d published despite %v", i, err)
		}
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v769", true},
		{"5.8.0", true},
		{"5.7.19", false},
		{"5.10.0-21-amd64", true},
		{"4.18.0-553.el8_10.x86_64", false},
		{"5.14.0-427.13.1.el9_4.x86_64", true},
		{"5.8-rc1", true},
		{"garbage", false},
		{"", false},
	} {
		if got := kernelAtLeast(c.release, 5, 8); got != c.want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v, want %v", c.release, got, c.want)
		}
	}
}
