package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestBWFlag: --bw auto turns BW auto on; without it, it is off; any
// other value is a mistake named on the command line.
func TestBWFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		auto    bool
		wantErr string
	}{
		{[]string{"/c/t"}, false, ""},
		{[]string{"--bw", "auto", "/c/t"}, true, ""},
		{[]string{"/c/t", "--bw=auto"}, true, ""},
		{[]string{"/c/t", "--bw=100MB"}, false, `--bw "100MB": want auto`},
	} {
		o, err := parse(tc.args, io.Discard)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
			var stderr bytes.Buffer
			if code := run(tc.args, io.Discard, &stderr); code != 2 {
				t.Errorf("%q: exit code %d, want 2", tc.args, code)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if o.cfg.BWAuto != tc.auto {
			t.Errorf("%q: BWAuto = %v, want %v", tc.args, o.cfg.BWAuto, tc.auto)
		}
	}
}
