package autobw

import (
	"testing"
	"time"
)

// TestBesideABurstyApplication runs the benchmark's scenes in simulation
// (sim_test.go) and checks the goals of BW auto: the application's p99
// beside the flush within 1.2 × its p99 alone; the flush beside it within
// 1.3 × the time the capacity it leaves free allows; alone within 1.1 ×
// the unthrottled flush; after the application stops, the flush back at
// 90 % of its rate alone within 2 s. The application starts at a different
// moment of the flush for each seed, so that the probes meet its bursts
// in different phases.
func TestBesideABurstyApplication(t *testing.T) {
	const size = 128 << 20
	alone := p99(simAlone(50))
	unthrottled := simulate(size, false, 0, 0, 1).flush
	appRate := simAppBytes / simAppPeriod.Seconds()
	free := time.Duration(float64(size) / (simCapa - appRate) * float64(time.Second))
	for seed := range uint64(6) {
		auto := simulate(size, true, 0, 0, seed)
		if r := auto.flush.Seconds() / unthrottled.Seconds(); r > 1.1 {
			t.Errorf("seed %d: alone, BW auto took %v, %.2f × the unthrottled %v, want ≤ 1.1", seed, auto.flush, r, unthrottled)
		}
		beside := simulate(size, true, time.Duration(seed)*7*time.Millisecond, time.Hour, seed)
		if r := float64(p99(beside.app)) / float64(alone); r > 1.2 {
			t.Errorf("seed %d: the application's p99 beside BW auto is %v, %.2f × alone (%v), want ≤ 1.2", seed, p99(beside.app), r, alone)
		}
		if r := beside.flush.Seconds() / free.Seconds(); r > 1.3 {
			t.Errorf("seed %d: beside the application BW auto took %v, %.2f × size ÷ (C − app rate) = %v, want ≤ 1.3", seed, beside.flush, r, free)
		}
		t.Logf("seed %d: alone %.2f × unthrottled; beside: flush %.2f × size ÷ (C − app rate), app p99 %.2f × alone",
			seed, auto.flush.Seconds()/unthrottled.Seconds(), beside.flush.Seconds()/free.Seconds(), float64(p99(beside.app))/float64(alone))
		third := auto.flush / 3
		step := simulate(size, true, third, 2*third, seed)
		want := 0.9 * float64(size) / auto.flush.Seconds()
		if d, ok := step.f.recovered(t0.Add(2*third), 500*time.Millisecond, want); !ok || d > 2*time.Second {
			t.Errorf("seed %d: after the application stopped the flush was back at %.1f MB/s after %v (%v), want within 2 s", seed, want/1e6, d, ok)
		}
	}
}
