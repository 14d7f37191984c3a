package metrics

import (
	"path/filepath"
	"testing"
)

// TestBWAutoGauge: the BW auto gauge is present, with the rate, only when
// BW auto is on (a rate above 0).
func TestBWAutoGauge(t *testing.T) {
	const name = "scr_transferd_bw_auto_bytes_per_second"
	for _, tc := range []struct {
		rate float64
		want bool
	}{{0, false}, {25e6, true}} {
		m := NewTextfile(filepath.Join(t.TempDir(), "scr.prom"), "/t", Build{})
		fams := parse(t, m.Render(Sample{State: "RUNNING", BWAuto: tc.rate}))
		if _, ok := fams[name]; ok != tc.want {
			t.Fatalf("BWAuto %g: %s present = %v, want %v", tc.rate, name, ok, tc.want)
		}
		if tc.want {
			if got := value(t, fams, name, map[string]string{"transfer_file": "/t"}); got != tc.rate {
				t.Errorf("%s = %v, want %v", name, got, tc.rate)
			}
		}
	}
}
