package transfer

import (
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// FuzzRead reads any transfer file in its printed form: Read never panics,
// the FLUSH record it accepts is consistent (an end not before the start,
// WRITTEN not negative), Progress never measures a negative time or byte
// count, and the daemon's edits of the record read back as written.
func FuzzRead(f *testing.F) {
	f.Add("FLUSH\n  STARTED\n    1764000000.250\n  WRITTEN\n    10\n  ENDED\n    1764000004.000\nFLAG\n  DONE\n")
	f.Add("FLUSH\n  STARTED\n    1764000000.250\n  WRITTEN\n    10\nSTATE\n  RUNNING\nFILES\n  /c/a\n    DESTINATION\n      /p/a\n    SIZE\n      100\n    WRITTEN\n      50\n")
	f.Add("FLUSH\n  STARTED\n    nan\n  WRITTEN\n    -1\n")
	f.Add("FLUSH\n  STARTED\n    1e300\n  ENDED\n    1\n    2\n")
	f.Add("COMMAND\n  RUN\nBW\n  52428800.000000\nPERCENT\n  x\n")
	f.Fuzz(func(t *testing.T, s string) {
		tree, err := hashfile.Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		v := Read(tree)
		fl := v.Flush
		if !fl.Started.IsZero() && (fl.Written < 0 || !fl.Ended.IsZero() && fl.Ended.Before(fl.Started)) {
			t.Fatalf("inconsistent record accepted: %+v", fl)
		}
		now := time.Unix(1.8e9, 0)
		if p, ok := v.Progress(now); ok && (p.Elapsed < 0 || p.Written < 0) {
			t.Fatalf("progress %+v", p)
		}
		_, written := v.Totals()
		at := time.UnixMilli(1_800_000_000_123)
		BeginFlush(tree, at, written)
		EndFlush(tree, at.Add(time.Second), written)
		back := Read(tree).Flush
		if !back.Started.Equal(at) || !back.Ended.Equal(at.Add(time.Second)) || back.Written != max(written, 0) {
			t.Fatalf("record written as %v..%v from %d, read back as %+v", at, at.Add(time.Second), written, back)
		}
	})
}
