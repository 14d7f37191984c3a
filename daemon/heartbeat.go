package daemon

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Heartbeat records when the run loop and the copy under way last made
// progress, so that a watchdog pings only while they do. The loop beats on
// every turn and on a ticker while idle; the copy beats at every commit
// and every pacing step of a verification. A loop blocked on the library's
// lock or a copy stuck in a hung fsync stop beating.
type Heartbeat struct {
	every       time.Duration
	workerGrace atomic.Int64 // extra time a copy may take between beats (its commit interval)
	loop        atomic.Int64 // unix ns of the loop's last beat
	worker      atomic.Int64 // unix ns of the copy's last beat; 0 when no copy runs
}

// NewHeartbeat returns a Heartbeat whose idle loop beats every every. If
// every is not positive (no watchdog reads it), an idle loop does not wake
// up to beat: an idle daemon stays asleep.
func NewHeartbeat(every time.Duration) *Heartbeat {
	h := &Heartbeat{every: max(every, 0)}
	h.loopBeat()
	return h
}

func (h *Heartbeat) setWorkerGrace(d time.Duration) { h.workerGrace.Store(int64(d)) }
func (h *Heartbeat) loopBeat()                      { h.loop.Store(time.Now().UnixNano()) }
func (h *Heartbeat) workerStart()                   { h.worker.Store(time.Now().UnixNano()) }
func (h *Heartbeat) workerStop()                    { h.worker.Store(0) }

// workerBeat records the copy's progress, unless no copy is under way (a
// copy left behind by a shutdown).
func (h *Heartbeat) workerBeat() {
	if old := h.worker.Load(); old != 0 {
		h.worker.CompareAndSwap(old, time.Now().UnixNano())
	}
}

// Stalled says what has made no progress for longer than limit (the copy
// is allowed its commit interval on top), or "" if both are alive.
func (h *Heartbeat) Stalled(now time.Time, limit time.Duration) string {
	if age := now.Sub(time.Unix(0, h.loop.Load())); age > limit {
		return fmt.Sprintf("the run loop has made no progress for %v", age.Round(time.Millisecond))
	}
	if w := h.worker.Load(); w != 0 {
		if age := now.Sub(time.Unix(0, w)); age > limit+time.Duration(h.workerGrace.Load()) {
			return fmt.Sprintf("the copy has made no progress for %v", age.Round(time.Millisecond))
		}
	}
	return ""
}
