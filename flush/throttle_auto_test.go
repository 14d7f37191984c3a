package flush

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/flush/autobw"
)

// feedAuto reports n writes of one chunk each to th, every gap, each
// having taken took; it returns the time after the last.
func feedAuto(th *Throttle, now time.Time, n int, gap, took time.Duration) time.Time {
	for range n {
		now = now.Add(gap)
		th.observeAt(now, autobw.Sample{Kind: autobw.Write, Bytes: autobw.ContentionChunk, Took: took})
	}
	return now
}

// TestAutoRateInForce drives BW auto through the throttle on a fake clock:
// the rate in force is the controller's, BW its ceiling, and a queue at the
// destination lowers it and empties the bucket.
func TestAutoRateInForce(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name  string
		bw    float64
		steps func(th *Throttle, now time.Time) time.Time
		check func(t *testing.T, th *Throttle, now time.Time)
	}{
		{"auto starts at autobw.Start", 0,
			func(th *Throttle, now time.Time) time.Time { return now },
			func(t *testing.T, th *Throttle, now time.Time) {
				if th.limit != autobw.Start {
					t.Errorf("rate in force %.0f, want autobw.Start %d", th.limit, autobw.Start)
				}
			}},
		{"an idle destination: the rate grows to BW and no further", 20e6,
			func(th *Throttle, now time.Time) time.Time { return feedAuto(th, now, 500, 2*ms, ms) },
			func(t *testing.T, th *Throttle, now time.Time) {
				if th.limit != 20e6 {
					t.Errorf("rate in force %.0f, want BW, 20e6", th.limit)
				}
			}},
		{"a queue: the rate falls and the bucket is empty", 0,
			func(th *Throttle, now time.Time) time.Time {
				// Each write one sample (autobw.MinSampleTime).
				now = feedAuto(th, now, 500, 6*ms, 5*ms)
				slow := 5*ms + time.Duration(float64(5*ms)*(autobw.Target+1))
				return feedAuto(th, now, 3, slow+ms, slow)
			},
			func(t *testing.T, th *Throttle, now time.Time) {
				if capa := float64(autobw.ContentionChunk) / 5e-3; th.limit > capa/2 {
					t.Errorf("rate in force %.0f after three samples delayed past the target, want at most half the capacity, %.0f", th.limit, capa/2)
				}
				k, d, _, _ := th.reserveAt(now, autobw.ContentionChunk)
				if want := time.Duration(float64(k) / th.limit * float64(time.Second)); d < want*9/10 {
					t.Errorf("a chunk waits %v, want about %v: bytes banked before the queue went out at once", d, want)
				}
			}},
		{"auto off: BW again", 20e6,
			func(th *Throttle, now time.Time) time.Time {
				now = feedAuto(th, now, 10, 20*ms, 20*ms)
				th.setAutoAt(now, false)
				return now
			},
			func(t *testing.T, th *Throttle, now time.Time) {
				if th.limit != 20e6 || th.AutoRate() != 0 {
					t.Errorf("rate in force %.0f, auto rate %.0f; want BW, 20e6, and 0", th.limit, th.AutoRate())
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := newThrottleAt(t0)
			th.setBWAt(t0, tt.bw)
			th.setAutoAt(t0, true)
			th.beginAt(t0)
			now := tt.steps(th, t0)
			tt.check(t, th, now)
		})
	}
}

// TestAutoChunks: under BW auto a copy moves the controller's chunk at once
// (autobw.ContentionChunk in its first second) and the bucket holds one
// chunk, however high the rate; PERCENT is untouched.
func TestAutoChunks(t *testing.T) {
	th := newThrottleAt(t0)
	th.setAutoAt(t0, true)
	th.setPercentAt(t0, 50)
	feedAuto(th, t0, 500, 100*time.Microsecond, 50*time.Microsecond) // a fast destination
	if th.limit < 1e9 {
		t.Fatalf("rate in force %.0f on a fast idle destination, want it high", th.limit)
	}
	if c := th.chunkSize(8 << 20); c != autobw.ContentionChunk {
		t.Errorf("chunk %d, want autobw.ContentionChunk %d", c, autobw.ContentionChunk)
	}
	if b := th.lim.Burst(); b != autobw.ContentionChunk {
		t.Errorf("bucket of %d bytes, want one chunk, %d", b, autobw.ContentionChunk)
	}
	if th.pct != 0.5 {
		t.Errorf("PERCENT %g under BW auto, want 0.5", th.pct)
	}
}

// TestCopyReportsToAuto: a copy reports the latency of each write and of
// each commit to BW auto, over all the bytes it writes and makes durable;
// without BW auto nothing is measured. Both a lone file and a batch of
// files each fsynced are copied.
func TestCopyReportsToAuto(t *testing.T) {
	const size = 3<<20 + 12345
	data := randBytes(size, 7)
	for _, auto := range []bool{false, true} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("auto=%v,batch=%v", auto, batch), func(t *testing.T) {
				dir := t.TempDir()
				src := filepath.Join(dir, "src")
				writeFile(t, src, data)
				th := NewThrottle()
				th.SetAuto(auto)
				c := NewCopier(th, Options{SyncBytes: 1 << 20})
				job := Job{Src: src, Dst: filepath.Join(dir, "pfs", "dst"), Size: size}
				var b *Batch
				if batch {
					b = NewBatch(th, true)
					job.Batch = b
				}
				res, err := c.Copy(context.Background(), job, nil)
				if err == nil && b != nil {
					err = b.Sync(context.Background())
					res.Complete = err == nil && b.Err(job.Dst) == nil
					res.Written = size
				}
				if err != nil || !res.Complete {
					t.Fatalf("copy: %+v, %v", res, err)
				}
				checkDst(t, res, job.Dst, data)
				st := th.Stats()
				want := int64(0)
				if auto {
					want = size
				}
				if st.AutoWriteBytes != want || st.AutoCommitBytes != want {
					t.Errorf("reported %d bytes written and %d committed, want %d each", st.AutoWriteBytes, st.AutoCommitBytes, want)
				}
				if r := th.AutoRate(); auto != (r > 0) || math.IsNaN(r) {
					t.Errorf("auto rate %.0f with auto=%v", r, auto)
				}
			})
		}
	}
}
