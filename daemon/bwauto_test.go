package daemon

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/scr-transferd/scr-transferd/flush"
)

// TestLogAuto: the rate in force under BW auto is logged once when first
// known, and not again while it has not changed by a quarter; nothing is
// logged with BW auto off.
func TestLogAuto(t *testing.T) {
	for _, auto := range []bool{false, true} {
		core, logs := observer.New(zap.InfoLevel)
		th := flush.NewThrottle()
		th.SetAuto(auto)
		d := &daemon{log: zap.New(core), throttle: th, limits: &limits{bw: 50e6}}
		d.logAuto()
		d.logAuto()
		want := 0
		if auto {
			want = 1
		}
		lines := logs.FilterMessage("bw auto rate").All()
		if len(lines) != want {
			t.Fatalf("auto=%v: %d lines, want %d: %v", auto, len(lines), want, lines)
		}
		if auto {
			if c := lines[0].ContextMap()["ceiling"]; c == nil {
				t.Errorf("the line does not give the ceiling: %v", lines[0].ContextMap())
			}
		}
	}
}
