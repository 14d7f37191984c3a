package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// BenchmarkGroupFiles weighs groupFiles' larger groups for batches whose
// groups do not overlap: 20,000 files of 1 KiB flushed and recorded with
// the group size the process's RLIMIT_NOFILE gives today (on: groupFiles
// doubles batchFiles) and with groups of batchFiles files (off). It
// reports files/s. Run it with
//
//	go test -run '^$' -bench BenchmarkGroupFiles -benchtime 2x -count 5 ./daemon/
func BenchmarkGroupFiles(b *testing.B) {
	const n, size = 20000, 1 << 10
	dir := b.TempDir()
	srcs := make([]string, n)
	data := make([]byte, size)
	for i := range srcs {
		srcs[i] = filepath.Join(dir, "cache", fmt.Sprintf("rank_%d.ckpt", i))
		if i == 0 {
			if err := os.MkdirAll(filepath.Dir(srcs[i]), 0o700); err != nil {
				b.Fatal(err)
			}
		}
		data[0], data[1] = byte(i), byte(i>>8)
		if err := os.WriteFile(srcs[i], data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	unix.Sync()
	for _, c := range []struct {
		name       string
		batchFiles int // groupFiles(1) is twice this, within maxBatchFiles
	}{{"on", batchFiles()}, {"off", batchFiles() / 2}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				d := newGroupBenchDaemon(b, dir, srcs, size, c.batchFiles)
				b.StartTimer()
				flushAll(b, d)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
		})
	}
}

// newGroupBenchDaemon returns a daemon (two streams, no loop) whose fresh
// transfer file in dir lists srcs, of size bytes each, to be copied into
// dir/pfs, which it empties.
func newGroupBenchDaemon(b *testing.B, dir string, srcs []string, size, batchFiles int) *daemon {
	b.Helper()
	pfs := filepath.Join(dir, "pfs")
	if err := os.RemoveAll(pfs); err != nil {
		b.Fatal(err)
	}
	tf := filepath.Join(dir, "ctl", "transfer.scr")
	if err := os.MkdirAll(filepath.Dir(tf), 0o700); err != nil {
		b.Fatal(err)
	}
	tr := hashfile.New()
	for _, src := range srcs {
		transfer.AddFile(tr, src, filepath.Join(pfs, filepath.Base(src)), int64(size))
	}
	if err := os.WriteFile(tf, hashfile.Encode(tr), 0o600); err != nil {
		b.Fatal(err)
	}
	unix.Sync()
	cfg := Config{Settings: Settings{TransferFile: tf, Streams: 2}}
	cfg.setDefaults()
	th := flush.NewThrottle()
	d := &daemon{ctx: context.Background(), cfg: cfg.Settings, log: cfg.Log, store: hashfile.NewStore(tf, hashfile.Flock), throttle: th,
		copier: flush.NewCopier(th, cfg.Flush), beat: NewHeartbeat(0), batchFiles: batchFiles, results: make(chan result, 1)}
	d.copiers = []*flush.Copier{d.copier, flush.NewCopier(th, cfg.Flush)}
	d.planDescriptors()
	return d
}

// flushAll runs batches until the daemon's transfer file lists no pending
// file, failing on any file's error.
func flushAll(b *testing.B, d *daemon) {
	b.Helper()
	for {
		tr, err := d.store.Read()
		if err != nil {
			b.Fatal(err)
		}
		files := d.pickBatch(transfer.Read(tr), time.Now())
		if len(files) == 0 {
			return
		}
		d.startBatch(files)
		for _, r := range (<-d.results).batch {
			if r.err != nil || !r.res.Complete {
				b.Fatalf("%s: complete %v, error %v", r.job.file.Src, r.res.Complete, r.err)
			}
		}
	}
}
