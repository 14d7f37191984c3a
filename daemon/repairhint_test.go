package daemon

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

func TestRepairHint(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string // "" for no field
	}{
		{"does not decode", fmt.Errorf("reading /c/t.scrinfo: %w", hashfile.ErrFormat), "scr-ctl repair --dry-run /c/t.scrinfo"},
		{"another error", errors.New("permission denied"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := repairHint(tc.err, "/c/t.scrinfo")
			if tc.want == "" {
				if f.Type != zapcore.SkipType {
					t.Errorf("field %v, want none", f)
				}
				return
			}
			if f.Key != "action" || !strings.Contains(f.String, tc.want) {
				t.Errorf("field %s=%q, want action containing %q", f.Key, f.String, tc.want)
			}
		})
	}
}
