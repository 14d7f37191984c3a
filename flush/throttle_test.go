package flush

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestThrottleSettings(t *testing.T) {
	th := NewThrottle()
	tests := []struct {
		bw        float64
		wantBW    float64
		buf       int
		wantChunk int
	}{
		{0, 0, 1 << 20, 1 << 20},
		{-5, 0, 1 << 20, 1 << 20},
		{math.NaN(), 0, 1 << 20, 1 << 20},
		{math.Inf(1), 0, 1 << 20, 1 << 20},
		{1e6, 1e6, 1 << 20, minChunk},
		{64e6, 64e6, 1 << 20, 1e6},
		{1e9, 1e9, 1 << 20, 1 << 20},
	}
	for _, tc := range tests {
		th.SetBW(tc.bw)
		if got := th.bw; got != tc.wantBW {
			t.Errorf("SetBW(%v): bw %v, want %v", tc.bw, got, tc.wantBW)
		}
		if got := th.chunkSize(tc.buf); got != tc.wantChunk {
			t.Errorf("SetBW(%v): chunk %d, want %d", tc.bw, got, tc.wantChunk)
		}
		if tc.wantBW > 0 && th.lim.Burst() < tc.wantChunk {
			t.Errorf("SetBW(%v): burst %d below the chunk %d", tc.bw, th.lim.Burst(), tc.wantChunk)
		}
	}
	for _, p := range []float64{0, -1, 100, 250, math.NaN()} {
		th.SetPercent(p)
		if th.pct != 0 {
			t.Errorf("SetPercent(%v) set a limit", p)
		}
	}
	th.SetPercent(25)
	if got := th.pct; got != 0.25 {
		t.Errorf("SetPercent(25) = %v", got)
	}
	// Repeating a setting must not wake (and so shorten) pauses in progress.
	th.SetBW(5e6)
	th.SetPercent(30)
	_, ch := th.pauseAt(time.Now())
	th.SetBW(5e6)
	th.SetPercent(30)
	select {
	case <-ch:
		t.Error("repeating the same settings woke the paused copies")
	default:
	}
	th.SetPercent(31)
	select {
	case <-ch:
	default:
		t.Error("a new setting did not wake the paused copies")
	}
	var nilT *Throttle
	w := nilT.Begin()
	if nilT.chunkSize(4096) != 4096 || w.waitBytes(context.Background(), 1<<30) != nil || w.Pace(context.Background()) != nil {
		t.Error("a nil Throttle limits")
	}
	w.End()
}

// TestBWWired: at 2 MB/s, with a bucket that starts empty, copying 1 MB
// cannot take less than 0.5 s, less the one chunk (1/64 s) that may be
// moved at the instant its tokens arrive.
func TestBWWired(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	want := randBytes(1e6, 21)
	writeFile(t, src, want)
	th := NewThrottle()
	th.SetBW(2e6)
	start := time.Now()
	res, err := NewCopier(th, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: 1e6}, nil)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	checkDst(t, res, dst, want)
	if min := 500*time.Millisecond - time.Second/chunksPerSecond; elapsed < min {
		t.Errorf("1 MB at 2 MB/s took %v, the limit allows no less than %v", elapsed, min)
	}
	if s := th.Stats(); s.BWSleeps == 0 || s.BWSlept <= 0 || s.Sleeps != s.BWSleeps+s.PercentSleeps {
		t.Errorf("stats %+v do not show the bandwidth pauses", s)
	}
}

// TestBWChangeAppliesAtOnce lifts a limit that would make the copy last
// minutes while the copy waits under it.
func TestBWChangeAppliesAtOnce(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	want := randBytes(8<<20, 22)
	writeFile(t, src, want)
	th := NewThrottle()
	th.SetBW(64 << 10) // 128 s for the file
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && th.Stats().BWSleeps < 3 {
			time.Sleep(time.Millisecond)
		}
		th.SetBW(0)
	}()
	start := time.Now()
	res, err := NewCopier(th, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: int64(len(want))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkDst(t, res, dst, want)
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("copy took %v: lifting the limit did not apply", d)
	}
}

// TestThrottleSleepsHonourContext: a copy paused by either limit returns as
// soon as its context ends.
func TestThrottleSleepsHonourContext(t *testing.T) {
	for _, mode := range []string{"bandwidth", "percent"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			writeFile(t, src, randBytes(4<<20, 24))
			th := NewThrottle()
			if mode == "bandwidth" {
				th.SetBW(16 << 10) // minutes for the file
			} else {
				th.SetPercent(0.5)
				th.burst = 0 // pause at once: the copy is over within one burstWork
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) && th.Stats().Sleeps == 0 {
					time.Sleep(time.Millisecond)
				}
				cancel()
			}()
			start := time.Now()
			_, err := NewCopier(th, Options{}).Copy(ctx, Job{Src: src, Dst: dst, Size: 4 << 20}, nil)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("cancellation took %v", d)
			}
			if _, err := os.Stat(dst); err == nil {
				t.Error("destination published")
			}
		})
	}
}

// TestSharedThrottle runs two copies under one limit: together they may not
// exceed it (4 MB/s, empty bucket: 2 MB need at least 0.5 s less a chunk),
// and both must come out intact.
func TestSharedThrottle(t *testing.T) {
	dir := t.TempDir()
	th := NewThrottle()
	th.SetBW(4e6)
	th.SetPercent(90)
	errs := make(chan error, 2)
	start := time.Now()
	for i := range 2 {
		src, dst := filepath.Join(dir, "src"+strconv.Itoa(i)), filepath.Join(dir, "dst"+strconv.Itoa(i))
		want := randBytes(1e6, uint64(30+i))
		writeFile(t, src, want)
		go func() {
			res, err := NewCopier(th, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: 1e6}, nil)
			if err == nil {
				if got, rerr := os.ReadFile(dst); rerr != nil || !bytes.Equal(got, want) || res.CRC != crc32.ChecksumIEEE(want) {
					err = fmt.Errorf("copy %d differs from its source (%v)", i, rerr)
				}
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if d, min := time.Since(start), 500*time.Millisecond-time.Second/chunksPerSecond; d < min {
		t.Errorf("2 MB under a shared 4 MB/s limit took %v, the limit allows no less than %v", d, min)
	}
}

// TestOneSecondFlush: a flush of one second's worth of data at the limit
// takes at least that second (less the one chunk moved when its tokens
// arrive): the bucket starts empty and does not fill while the daemon sits
// idle with the limit set (the sleep is that idle spell, longer than the
// bucket's 0.125 s), so there is no start burst. The files
// live in memory where possible (/dev/shm), so that fsync, which takes no
// tokens, does not hide a burst.
func TestOneSecondFlush(t *testing.T) {
	const bw = 16 << 20
	dir := memDir(t)
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	want := randBytes(bw, 28)
	writeFile(t, src, want)
	th := NewThrottle()
	th.SetBW(bw)
	time.Sleep(time.Duration(2 * burstSeconds * float64(time.Second)))
	start := time.Now()
	res, err := NewCopier(th, Options{}).Copy(context.Background(), Job{Src: src, Dst: dst, Size: bw}, nil)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	checkDst(t, res, dst, want)
	if min := time.Second - time.Second/chunksPerSecond; elapsed < min {
		t.Errorf("one second's worth at the limit took %v: %.3f× the limit", elapsed, time.Second.Seconds()/elapsed.Seconds())
	}
}
