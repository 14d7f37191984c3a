package flush

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestBatchDefersTheEnd: copies completed into a Batch are published and
// their data fsynced, but commit is never called with the size and each
// destination directory is held once, for Batch.Sync to fsync.
func TestBatchDefersTheEnd(t *testing.T) {
	dir := t.TempDir()
	c := NewCopier(nil, Options{})
	b := &Batch{}
	data := []byte("checkpoint bytes")
	for i, d := range []string{"a", "a", "b"} {
		src := filepath.Join(dir, "src"+string(rune('0'+i)))
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "pfs", d, "f"+string(rune('0'+i)))
		var commits []int64
		res, err := c.Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(data)), Batch: b},
			func(n int64, _ uint32) error { commits = append(commits, n); return nil })
		if err != nil || !res.Complete || res.Written != int64(len(data)) {
			t.Fatalf("%s: %+v, %v", dst, res, err)
		}
		if len(commits) != 0 {
			t.Errorf("%s: commits %v: the completion is the caller's to record", dst, commits)
		}
		if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
			t.Errorf("%s not published", dst)
		}
	}
	if n := b.Dirs(); n != 2 {
		t.Errorf("the batch holds %d directories, want 2 (each once)", n)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := b.Dirs(); n != 0 {
		t.Errorf("%d directories left after Sync", n)
	}
}
