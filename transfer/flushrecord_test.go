package transfer

import (
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// TestFlushRecord: the record survives the file's encoding, and Progress
// measures a flush under way, an ended one, and none where the record no
// longer describes the flush the file asks for.
func TestFlushRecord(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 250e6, time.UTC)
	tree := hashfile.New()
	SetCommand(tree, Run)
	SetState(tree, Running)
	f := File{Src: "/c/a", Dest: "/p/a", Size: 100 << 20}
	AddFile(tree, f.Src, f.Dest, f.Size)
	SetWritten(tree, f, 10<<20)
	BeginFlush(tree, t0, 10<<20)
	SetWritten(tree, f, 50<<20)

	reread := func() View {
		t.Helper()
		back, err := hashfile.Decode(hashfile.Encode(tree))
		if err != nil {
			t.Fatal(err)
		}
		v := Read(back)
		if len(v.Problems) != 0 {
			t.Fatalf("problems: %v", v.Problems)
		}
		return v
	}
	v := reread()
	if !v.Flush.Started.Equal(t0) || v.Flush.Written != 10<<20 || !v.Flush.Ended.IsZero() {
		t.Fatalf("record %+v, want started %v with 10 MiB written", v.Flush, t0)
	}
	p, ok := v.Progress(t0.Add(8 * time.Second))
	if !ok || p.Ended || p.Elapsed != 8*time.Second || p.Written != 40<<20 {
		t.Fatalf("under way: %+v %v, want 8 s and 40 MiB", p, ok)
	}
	if avg, ok := p.Average(); !ok || avg != 5<<20 {
		t.Errorf("average %v %v, want 5 MiB/s", avg, ok)
	}

	SetWritten(tree, f, f.Size)
	SetDone(tree, true)
	SetState(tree, Stopped)
	EndFlush(tree, t0.Add(18*time.Second), f.Size)
	v = reread()
	p, ok = v.Progress(t0.Add(time.Hour))
	if !ok || !p.Ended || p.Elapsed != 18*time.Second || p.Written != 90<<20 {
		t.Fatalf("ended: %+v %v, want 18 s and 90 MiB whenever read", p, ok)
	}

	// The library asks for a new flush: DONE goes; the record is of the
	// last one until the daemon begins the new one.
	SetCommand(tree, Run)
	if p, ok := reread().Progress(t0.Add(time.Hour)); ok {
		t.Errorf("a new RUN not begun yet measured with the last flush's record: %+v", p)
	}
	// Stopped before the end: nothing to measure.
	SetDone(tree, false)
	tree.Get(KeyFlush).Unset(KeyEnded)
	SetState(tree, Stopped)
	if p, ok := reread().Progress(t0.Add(time.Hour)); ok {
		t.Errorf("a stopped flush measured as under way: %+v", p)
	}

	// A RUN with nothing to copy ends at once: a record of no time.
	empty := hashfile.New()
	BeginFlush(empty, t0, 5)
	EndFlush(empty, t0, 5) // the earlier record ended: replaced
	EndFlush(empty, t0.Add(time.Minute), 7)
	SetDone(empty, true)
	v = Read(empty)
	if !v.Flush.Started.Equal(t0.Add(time.Minute)) || !v.Flush.Ended.Equal(v.Flush.Started) || v.Flush.Written != 7 {
		t.Errorf("a flush that found nothing to copy: %+v", v.Flush)
	}
	malformed := hashfile.New()
	malformed.Set(KeyFlush).SetValue(KeyStarted, "soon")
	EndFlush(malformed, t0, 3)
	if f := Read(malformed).Flush; !f.Started.Equal(t0) || !f.Ended.Equal(t0) || f.Written != 3 {
		t.Errorf("a malformed record ended: %+v, want one of no time at %v", f, t0)
	}
	if p, ok := v.Progress(t0); !ok || p.Elapsed != 0 {
		t.Errorf("progress %+v %v", p, ok)
	} else if _, ok := p.Average(); ok {
		t.Error("an average over no time")
	}
}

// TestFlushRecordMalformed: a damaged record is a problem named as such
// and reads as no record.
func TestFlushRecordMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *hashfile.Tree)
		want string
	}{
		{"started", func(r *hashfile.Tree) { r.SetValue(KeyStarted, "soon") }, `STARTED: "soon" is not a time`},
		{"no started", func(r *hashfile.Tree) { r.Unset(KeyStarted) }, "no STARTED"},
		{"written", func(r *hashfile.Tree) { r.SetValue(KeyWritten, "-1") }, "WRITTEN"},
		{"ended early", func(r *hashfile.Tree) { r.SetValue(KeyEnded, "1000.000") }, "ENDED before STARTED"},
		{"two ends", func(r *hashfile.Tree) { r.Set(KeyEnded).Set("1"); r.Get(KeyEnded).Set("2") }, "want one value"},
	} {
		tree := hashfile.New()
		BeginFlush(tree, time.Unix(1.7e9, 0), 1)
		tc.edit(tree.Get(KeyFlush))
		v := Read(tree)
		if !v.Flush.Started.IsZero() || len(v.Problems) != 1 || !strings.Contains(v.Problems[0].Error(), "FLUSH: ") ||
			!strings.Contains(v.Problems[0].Error(), tc.want) {
			t.Errorf("%s: record %+v, problems %v; want one naming FLUSH and %q", tc.name, v.Flush, v.Problems, tc.want)
		}
	}
}
