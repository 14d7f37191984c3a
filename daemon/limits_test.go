package daemon

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestLimitsWarnedOncePerValue: each BW or PERCENT out of range or
// unusable is warned about once while it stands (not on every pass), again
// when it comes back, and the warning says what is in force: a BW below
// 1 B/s raised to 1 B/s (not shown as 0), a PERCENT above 100 taken as no
// limit, a malformed BW keeping the previous limit.
func TestLimitsWarnedOncePerValue(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	d := &daemon{log: zap.New(core), throttle: flush.NewThrottle()}
	pass := func(bw, pct string) {
		t.Helper()
		tr := hashfile.New()
		tr.SetValue(transfer.KeyBW, bw)
		tr.SetValue(transfer.KeyPercent, pct)
		d.applyLimits(transfer.Read(tr))
	}
	warnings := func() []observer.LoggedEntry {
		return logs.FilterMessage("transfer file value not taken as written").AllUntimed()
	}
	for _, step := range []struct {
		bw, pct      string
		wantWarnings int     // in all, after this pass
		wantBW       float64 // in force after this pass
		wantPct      float64
		last         map[string]any // fields of the last warning, when it is new
	}{
		{bw: "52428800.000000", pct: "0", wantBW: 52428800},
		{bw: "52428800.000000", pct: "150.000000", wantWarnings: 1, wantBW: 52428800, wantPct: 100,
			last: map[string]any{"percent_in_force": "unlimited", "bw_in_force": 52428800.0}},
		{bw: "52428800.000000", pct: "150.000000", wantWarnings: 1, wantBW: 52428800, wantPct: 100},
		{bw: "banana", pct: "150.000000", wantWarnings: 2, wantBW: 52428800, wantPct: 100,
			last: map[string]any{"bw_in_force": 52428800.0}},
		{bw: "banana", pct: "150.000000", wantWarnings: 2, wantBW: 52428800, wantPct: 100},
		{bw: "0.500000", pct: "20", wantWarnings: 3, wantBW: 1, wantPct: 20,
			last: map[string]any{"bw_in_force": 1.0, "percent_in_force": 20.0}},
		{bw: "0.500000", pct: "20", wantWarnings: 3, wantBW: 1, wantPct: 20},
		{bw: "1000", pct: "20", wantWarnings: 3, wantBW: 1000, wantPct: 20},
		{bw: "banana", pct: "20", wantWarnings: 4, wantBW: 1000, wantPct: 20,
			last: map[string]any{"bw_in_force": 1000.0}},
	} {
		pass(step.bw, step.pct)
		w := warnings()
		if len(w) != step.wantWarnings {
			t.Fatalf("BW %q PERCENT %q: %d warnings in all; want %d: %v", step.bw, step.pct, len(w), step.wantWarnings, w)
		}
		if d.limits.bw != step.wantBW || d.limits.percent != step.wantPct {
			t.Errorf("BW %q PERCENT %q: in force BW %v PERCENT %v; want %v, %v",
				step.bw, step.pct, d.limits.bw, d.limits.percent, step.wantBW, step.wantPct)
		}
		if step.last == nil {
			continue
		}
		last := w[len(w)-1]
		if last.Level != zapcore.WarnLevel {
			t.Errorf("warning at %v", last.Level)
		}
		fields := last.ContextMap()
		for k, want := range step.last {
			if fields[k] != want {
				t.Errorf("BW %q PERCENT %q: %s = %v; want %v (fields %v)", step.bw, step.pct, k, fields[k], want, fields)
			}
		}
		if e, _ := fields["error"].(string); !strings.Contains(e, "in force") {
			t.Errorf("warning %q does not say what is in force", e)
		}
	}
}
