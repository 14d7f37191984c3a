package daemon

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// spreadNodes is how many nodes the spread tests simulate, each drawing
// its jitter from its own random source.
const spreadNodes = 1000

// nodeDaemon is the daemon of node i in a spread test: its own random
// source, --retry-min 1s, --retry-max 4s.
func nodeDaemon(i int) *daemon {
	rng := rand.New(rand.NewPCG(uint64(i), 7))
	return &daemon{cfg: Settings{RetryMin: time.Second, RetryMax: 4 * time.Second}, log: zap.NewNop(),
		beat: NewHeartbeat(0), retries: map[string]*retry{}, logOnce: logOnce{warned: map[string]string{}},
		loopState: loopState{published: map[string]*unrecorded{}}, rand: rng.Float64}
}

// checkSpread fails t unless the waits lie in [ceiling/2, ceiling] and
// spread evenly over it: each tenth of it should hold about a tenth of
// the nodes, where retries in lockstep would all fall in one.
func checkSpread(t *testing.T, what string, waits []time.Duration, ceiling time.Duration) {
	t.Helper()
	var bins [10]int
	for _, w := range waits {
		if w < ceiling/2 || w > ceiling {
			t.Fatalf("%s: wait %v outside [%v, %v]", what, w, ceiling/2, ceiling)
		}
		bins[min(int(10*(w-ceiling/2)/(ceiling/2)), 9)]++
	}
	if slices.Min(bins[:]) < len(waits)/20 || slices.Max(bins[:]) > len(waits)/5 {
		t.Errorf("%s: retries of %d nodes per tenth of [%v, %v]: %v, want about %d each",
			what, len(waits), ceiling/2, ceiling, bins, len(waits)/10)
	}
}

// waitFrom returns how long after before an attempt is due at, checking
// that it is the wait drawn (the clock moved at most a second between).
func waitFrom(t *testing.T, before time.Time, r *retry) time.Duration {
	t.Helper()
	if w := r.at.Sub(before); w < r.wait || w > r.wait+time.Second {
		t.Fatalf("retry at %v after the failure, its wait is %v", w, r.wait)
	}
	return r.wait
}

// TestRetriesSpread: a thousand nodes whose copy of the same file failed at
// the same moment (a parallel file system outage) retry spread over half
// of their back-off, not in lockstep; each waits at least half of it and at
// most all of it, and the ceiling still doubles up to --retry-max.
func TestRetriesSpread(t *testing.T) {
	f := transfer.File{Src: "/cache/rank_0.ckpt", Dest: "/pfs/rank_0.ckpt"}
	for failures, ceiling := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		var waits []time.Duration
		for i := range spreadNodes {
			d := nodeDaemon(i)
			var r *retry
			for range failures + 1 {
				before := time.Now()
				r = d.backoff(f)
				waitFrom(t, before, r)
			}
			if r.tries != failures+1 {
				t.Fatalf("after %d failures: %d back-offs counted", failures+1, r.tries)
			}
			waits = append(waits, r.wait)
		}
		checkSpread(t, fmt.Sprintf("after %d failures", failures+1), waits, ceiling)
	}
}

// TestTransferFileRetriesSpread: a thousand nodes that cannot rewrite their
// transfer files at the same moment (the same full file system image on
// every node, an RLIMIT_FSIZE set for the whole job) try them again spread
// over half of the back-off, not in lockstep, on the same doubling back-off
// as files in error; a rewrite that succeeds starts it from the first wait
// again.
func TestTransferFileRetriesSpread(t *testing.T) {
	err := fmt.Errorf("recording WRITTEN 3000: %w", &hashfile.WriteError{Path: "/ctl/transfer.scrinfo", Err: unix.ENOSPC})
	for failures, ceiling := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		var waits []time.Duration
		for i := range spreadNodes {
			d := nodeDaemon(i)
			for range failures + 1 {
				before := time.Now()
				d.fileError(err)
				waitFrom(t, before, &d.fileRetry)
			}
			waits = append(waits, d.fileRetry.wait)
			if i == 0 {
				d.fileUsable()
				d.fileError(err)
				if w := d.fileRetry.wait; w < time.Second/2 || w > time.Second {
					t.Fatalf("the first failure after the file was usable again waits %v, want the first back-off", w)
				}
			}
		}
		checkSpread(t, fmt.Sprintf("transfer file, after %d failures", failures+1), waits, ceiling)
	}
}

// TestSourceReplacedRetriesSpread: a source the library replaced during its
// copy, on a thousand nodes at once (the next checkpoint written over the
// one being flushed), is copied again from 0 after the first wait of the
// back-off, spread over half of it, not in lockstep; a failure of the new
// version then waits the first back-off again, and its failures are not
// counted as the old version's.
func TestSourceReplacedRetriesSpread(t *testing.T) {
	f := transfer.File{Src: "/cache/rank_0.ckpt", Dest: "/pfs/rank_0.ckpt", Size: 1 << 20}
	var waits []time.Duration
	for i := range spreadNodes {
		d := nodeDaemon(i)
		d.backoff(f) // failures of the old version
		d.backoff(f)
		before := time.Now()
		d.finish(result{job: &job{file: f, cancel: func() {}},
			err: fmt.Errorf("%s: %w", f.Src, flush.ErrSourceReplaced)})
		r := d.retries[f.Src]
		if r == nil {
			t.Fatal("a replaced source is not waiting for its next attempt")
		}
		waits = append(waits, waitFrom(t, before, r))
		if r.tries != 0 || r.failures != 0 {
			t.Fatalf("the new version starts with %d back-offs and %d failures counted", r.tries, r.failures)
		}
		if w := d.backoff(f).wait; w < time.Second/2 || w > time.Second {
			t.Fatalf("the new version's first failure waits %v, want the first back-off", w)
		}
	}
	checkSpread(t, "source replaced", waits, time.Second)
}

// TestRetryNext: the back-off of a file on a fixed clock and fixed draws:
// the wait doubles under --retry-max, drawn within its upper half, and the
// attempt is due that long after the failure.
func TestRetryNext(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	p := retryPolicy(Settings{RetryMin: time.Second, RetryMax: 4 * time.Second})
	var r retry
	for i, tc := range []struct {
		u    float64
		want time.Duration
	}{
		{0, 500 * time.Millisecond},
		{0.5, 1500 * time.Millisecond},
		{0.999, 3998 * time.Millisecond},
		{0, 2 * time.Second},
		{1, 4 * time.Second},
	} {
		now := t0.Add(time.Duration(i) * time.Minute)
		r.next(p, now, tc.u)
		if r.wait != tc.want || !r.at.Equal(now.Add(tc.want)) || r.tries != i+1 {
			t.Errorf("failure %d, draw %v: wait %v due %v after %d back-offs; want %v due %v after %d",
				i+1, tc.u, r.wait, r.at, r.tries, tc.want, now.Add(tc.want), i+1)
		}
	}
	if a := afresh(p, t0, 0.5); a.wait != 750*time.Millisecond || !a.at.Equal(t0.Add(a.wait)) || a.tries != 0 {
		t.Errorf("afresh: wait %v due %v after %d back-offs; want 750ms due %v after 0", a.wait, a.at, a.tries, t0.Add(750*time.Millisecond))
	}
}
