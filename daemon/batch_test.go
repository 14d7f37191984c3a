package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// A daemon embedded with a Config that leaves the copy's options unset
// batches small files as the command does: the batch is sized by the
// options a Copier works with, not by the zero values given.
func TestPickBatchUnderDefaultOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flush flush.Options
		size  int64
		want  int
	}{
		{"unset options, small files", flush.Options{}, 1 << 10, 5},
		{"unset options, a file too large to batch", flush.Options{}, 64 << 20, 1},
		{"small SyncBytes", flush.Options{SyncBytes: 8 << 10}, 1 << 10, 5},
		{"SyncBytes below four files", flush.Options{SyncBytes: 2 << 10}, 1 << 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Settings{Flush: tc.flush}
			cfg.setDefaults()
			d := &daemon{cfg: cfg, batchFiles: 16}
			var v transfer.View
			for i := range 5 {
				v.Files = append(v.Files, transfer.File{Src: fmt.Sprintf("/c/%d", i), Dest: fmt.Sprintf("/p/%d", i), Size: tc.size})
			}
			if got := d.pickBatch(v, time.Now()); len(got) != tc.want {
				t.Fatalf("picked %d files, want %d", len(got), tc.want)
			}
		})
	}
}

// TestBatchGroupsOverlap: a batch is made durable and recorded group by
// group. Groups of files of 64 KiB overlap: the next group is copied, and
// its sync begins, while one is made durable (the test holds the first
// group's sync until the second group's sync has begun, and fails if it
// never does), and it is made durable while the one before is recorded
// (the test holds the first group's record until the second is durable),
// but no group begins before the one two before it is recorded. Groups of 1 KiB files do not
// overlap: each begins once the one before is recorded. Either way every
// file ends complete, recorded, and equal to its source.
//
// The descriptors bound a group too (batchFiles, two per held copy): groups
// of 64 KiB files, two of them held at once, take batchFiles files; groups
// of 1 KiB files, held one at a time, twice as many.
func TestBatchGroupsOverlap(t *testing.T) {
	for _, tc := range []struct {
		name       string
		size       int
		files      int
		overlap    bool
		batchFiles int
		perGroup   int // files of a group: four by SyncBytes, or as the descriptors allow
	}{
		{"64 KiB files", 64 << 10, 12, true, 16, 4},
		{"1 KiB files", 1 << 10, 12, false, 16, 4},
		{"64 KiB files, few descriptors", 64 << 10, 6, true, 2, 2},
		{"1 KiB files, few descriptors", 1 << 10, 12, false, 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, store, data := newBatchDaemon(t, tc.files, tc.size, tc.batchFiles)

			held := 1
			if tc.overlap {
				held = 2
			}
			var mu sync.Mutex
			recorded := map[int]bool{}
			var problems []string
			secondOpened := make(chan struct{})
			secondSyncing := make(chan struct{})
			secondDurable := make(chan struct{})
			// awaited holds the group's step until ch is closed, and notes
			// the problem if that does not come within 30 s.
			awaited := func(ch <-chan struct{}, problem string) {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					mu.Lock()
					problems = append(problems, problem)
					mu.Unlock()
				}
			}
			d.onGroup = func(e groupEvent, k int) {
				switch e {
				case groupOpened:
					mu.Lock()
					if k >= held && !recorded[k-held] {
						problems = append(problems, fmt.Sprintf("group %d began before group %d was recorded", k, k-held))
					}
					mu.Unlock()
					if k == 1 {
						close(secondOpened)
					}
				case groupSyncing:
					if k == 0 && tc.overlap {
						awaited(secondOpened, "the second group was not begun while the first was made durable")
						awaited(secondSyncing, "the second group's sync waited for the end of the first's")
					}
					if k == 1 {
						close(secondSyncing)
					}
				case groupDurable:
					if k == 1 {
						close(secondDurable)
					}
				case groupRecording:
					if k == 0 && tc.overlap {
						awaited(secondDurable, "the second group was not made durable while the first waited to be recorded")
					}
				case groupRecorded:
					mu.Lock()
					recorded[k] = true
					mu.Unlock()
				}
			}

			res := runBatch(t, d, store, tc.files)
			mu.Lock()
			for _, p := range problems {
				t.Error(p)
			}
			if want := tc.files / tc.perGroup; len(recorded) != want {
				t.Errorf("%d groups recorded, want %d of %d files", len(recorded), want, tc.perGroup)
			}
			mu.Unlock()
			checkBatch(t, res, store, data)
		})
	}
}

// TestBatchLastGroupsRecordedTogether: the groups a batch makes durable
// once its copies are over are recorded in one update of the transfer
// file, not one each; a group is still recorded only once its own sync is
// done. The test holds the first group's sync, once done, until the second
// (and last) group's sync has begun, and counts the rewrites of the
// transfer file the batch makes.
func TestBatchLastGroupsRecordedTogether(t *testing.T) {
	d, store, data := newBatchDaemon(t, 8, 64<<10, 16)
	lastSyncing := make(chan struct{})
	var mu sync.Mutex
	var problems []string
	durable := map[int]bool{}
	d.onGroup = func(e groupEvent, k int) {
		mu.Lock()
		defer mu.Unlock()
		switch e {
		case groupSyncing:
			if k == 1 {
				close(lastSyncing)
			}
		case groupDurable:
			durable[k] = true
			if k == 0 {
				mu.Unlock()
				select {
				case <-lastSyncing:
				case <-time.After(30 * time.Second):
					problems = append(problems, "the second group's sync did not begin while the first's was held")
				}
				mu.Lock()
			}
		case groupRecording:
			if !durable[k] {
				problems = append(problems, fmt.Sprintf("group %d recorded before it was durable", k))
			}
		}
	}
	before := store.Rewrites()
	res := runBatch(t, d, store, 8)
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	mu.Unlock()
	if n := store.Rewrites() - before; n != 1 {
		t.Errorf("the two groups took %d rewrites of the transfer file, want 1", n)
	}
	checkBatch(t, res, store, data)
}

// newBatchDaemon returns a daemon (one stream, no loop) whose transfer
// file lists n files of size bytes, made in a temporary directory, with
// their contents by DESTINATION. Groups take four files each, or fewer
// where batchFiles bounds them.
func newBatchDaemon(t *testing.T, n, size, batchFiles int) (*daemon, *hashfile.Store, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	tf := filepath.Join(dir, "ctl", "transfer.scr")
	if err := os.MkdirAll(filepath.Dir(tf), 0o700); err != nil {
		t.Fatal(err)
	}
	store := hashfile.NewStore(tf, hashfile.Flock)
	data := map[string][]byte{}
	_, _, err := store.Update(func(tr *hashfile.Tree) error {
		for i := range n {
			src := filepath.Join(dir, "cache", fmt.Sprintf("f%02d", i))
			b := bytes.Repeat([]byte{byte(i + 1)}, size)
			if err := os.MkdirAll(filepath.Dir(src), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(src, b, 0o600); err != nil {
				return err
			}
			dst := filepath.Join(dir, "pfs", filepath.Base(src))
			data[dst] = b
			transfer.AddFile(tr, src, dst, int64(size))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Settings: Settings{TransferFile: tf, Streams: 1, Flush: flush.Options{SyncBytes: 4 * int64(size)}}}
	cfg.setDefaults()
	th := flush.NewThrottle()
	d := &daemon{ctx: t.Context(), cfg: cfg.Settings, log: cfg.Log, store: store, throttle: th, copier: flush.NewCopier(th, cfg.Flush),
		beat: NewHeartbeat(0), batchFiles: batchFiles, results: make(chan result, 1)}
	d.copiers = []*flush.Copier{d.copier}
	return d, store, data
}

// runBatch picks the n files of the daemon's transfer file as one batch,
// runs it, and returns its results.
func runBatch(t *testing.T, d *daemon, store *hashfile.Store, n int) []result {
	t.Helper()
	tr, err := store.Read()
	if err != nil {
		t.Fatal(err)
	}
	files := d.pickBatch(transfer.Read(tr), time.Now())
	if len(files) != n {
		t.Fatalf("picked %d files, want all %d", len(files), n)
	}
	d.startBatch(files)
	return (<-d.results).batch
}

// checkBatch fails unless every result is complete, every entry records
// WRITTEN = SIZE, and every DESTINATION holds its source's bytes (data).
func checkBatch(t *testing.T, res []result, store *hashfile.Store, data map[string][]byte) {
	t.Helper()
	for _, r := range res {
		if r.err != nil || !r.res.Complete {
			t.Errorf("%s: complete %v, error %v", r.job.file.Src, r.res.Complete, r.err)
		}
	}
	tr, err := store.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range transfer.Read(tr).Files {
		if f.Written != f.Size {
			t.Errorf("%s: WRITTEN %d, SIZE %d", f.Src, f.Written, f.Size)
		}
		if b, err := os.ReadFile(f.Dest); err != nil || !bytes.Equal(b, data[f.Dest]) {
			t.Errorf("%s: not its source's bytes (%v)", f.Dest, err)
		}
	}
}
