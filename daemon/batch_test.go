package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush"
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
			cfg := Config{Flush: tc.flush}
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
