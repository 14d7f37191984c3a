package daemon

import (
	"strings"
	"testing"
	"time"
)

func TestHeartbeatStalled(t *testing.T) {
	const limit = 500 * time.Millisecond
	const grace = 2 * time.Second
	for _, tc := range []struct {
		name         string
		loopAge      time.Duration
		workerAge    time.Duration // <0: no copy under way
		wantContains string        // "" when alive
	}{
		{"idle and beating", 100 * time.Millisecond, -1, ""},
		{"loop stuck", 600 * time.Millisecond, -1, "run loop"},
		{"copy within its commit interval", 100 * time.Millisecond, 2 * time.Second, ""},
		{"copy stuck", 100 * time.Millisecond, 3 * time.Second, "copy"},
		{"both stuck: the loop is named", time.Second, 3 * time.Second, "run loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHeartbeat(100 * time.Millisecond)
			h.setWorkerGrace(grace)
			now := time.Now()
			h.loop.Store(now.Add(-tc.loopAge).UnixNano())
			if tc.workerAge >= 0 {
				h.worker.Store(now.Add(-tc.workerAge).UnixNano())
			}
			got := h.Stalled(now, limit)
			if (tc.wantContains == "") != (got == "") || !strings.Contains(got, tc.wantContains) {
				t.Fatalf("Stalled = %q, want %q", got, tc.wantContains)
			}
		})
	}
}

func TestHeartbeatWorkerBeatAfterStop(t *testing.T) {
	h := NewHeartbeat(0)
	h.workerStart()
	h.workerStop()
	h.workerBeat() // a copy left behind by a shutdown beats late
	if h.worker.Load() != 0 {
		t.Fatal("a late beat revived a stopped copy")
	}
}
