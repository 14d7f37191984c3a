package daemon

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/transfer"
)

// pass is one pass of a decision sequence: at t0+at, the view read and
// whether a copy is under way, and the decision wanted.
type pass struct {
	at      time.Duration
	v       transfer.View
	copying bool
	want    decision
}

// runPasses decides each pass in turn from the state the previous ones
// left (coreState.advance), starting at the daemon's first pass, as
// x/time/rate's tests run a limiter through fixed times.
func runPasses(t *testing.T, t0 time.Time, passes []pass) {
	t.Helper()
	s := coreState{first: true}
	for i, p := range passes {
		s.copying = p.copying
		got := decide(p.v, s, t0.Add(p.at))
		if !reflect.DeepEqual(got, p.want) {
			t.Fatalf("pass %d at %v: got %+v\nwant %+v", i, p.at, got, p.want)
		}
		s = s.advance(got)
	}
}

func pending(n int) []transfer.File {
	fs := make([]transfer.File, n)
	for i := range fs {
		fs[i] = transfer.File{Src: "/c/" + string(rune('a'+i)), Dest: "/p/" + string(rune('a'+i)), Size: 10}
	}
	return fs
}

func complete(n int) []transfer.File {
	fs := pending(n)
	for i := range fs {
		fs[i].Written, fs[i].HasCRC = fs[i].Size, true
	}
	return fs
}

func TestDecideFlush(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	run := transfer.Run
	runPasses(t, t0, []pass{
		// The first pass records its STATE whatever the file holds.
		{0, transfer.View{State: transfer.Stopped},
			false, decision{want: transfer.Stopped, next: transfer.Stopped, recordState: true, first: true}},
		// RUN with a file pending: RUNNING, and the flush begins.
		{time.Second, transfer.View{Command: run, State: transfer.Stopped, Files: pending(2)},
			false, decision{want: transfer.Running, next: transfer.Running, recordState: true, flushBegan: at(time.Second)}},
		// Copying: nothing to record; the flush under way does not begin again.
		{2 * time.Second, transfer.View{Command: run, State: transfer.Running, Files: pending(2)},
			true, decision{want: transfer.Running, next: transfer.Running}},
		// Every file complete, but the copy's result not yet handled: not DONE.
		{3 * time.Second, transfer.View{Command: run, State: transfer.Running, Files: complete(2)},
			true, decision{want: transfer.Running, next: transfer.Running}},
		// Idle and nothing pending: DONE, STOPPED, the flush ends.
		{4 * time.Second, transfer.View{Command: run, State: transfer.Running, Files: complete(2)},
			false, decision{want: transfer.Stopped, next: transfer.Stopped, recordState: true, done: true, flushEnded: at(4 * time.Second)}},
		// RUN with DONE rests in STOPPED, recording nothing.
		{5 * time.Second, transfer.View{Command: run, State: transfer.Stopped, Done: true, Files: complete(2)},
			false, decision{want: transfer.Stopped, next: transfer.Stopped}},
		// The library adds a file and clears DONE: a new flush begins.
		{6 * time.Second, transfer.View{Command: run, State: transfer.Stopped, Files: pending(3)},
			false, decision{want: transfer.Running, next: transfer.Running, recordState: true, flushBegan: at(6 * time.Second)}},
	})
}

func TestDecideStop(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	runPasses(t, t0, []pass{
		{0, transfer.View{Command: transfer.Run, Files: pending(1)},
			false, decision{want: transfer.Running, next: transfer.Running, recordState: true, flushBegan: at(0), first: true}},
		// STOP while copying: the copy stops first, STATE stays RUNNING.
		{time.Second, transfer.View{Command: transfer.Stop, State: transfer.Running, Files: pending(1)},
			true, decision{want: transfer.Stopped, next: transfer.Running}},
		// Once it has stopped, STOPPED is recorded.
		{2 * time.Second, transfer.View{Command: transfer.Stop, State: transfer.Running, Files: pending(1)},
			false, decision{want: transfer.Stopped, next: transfer.Stopped, recordState: true}},
		// RUN again: the stopped flush is not resumed, a new one begins.
		{3 * time.Second, transfer.View{Command: transfer.Run, State: transfer.Stopped, Files: pending(1)},
			false, decision{want: transfer.Running, next: transfer.Running, recordState: true, flushBegan: at(3 * time.Second)}},
		// EXIT while copying: RUNNING until the copy has stopped, then EXITING.
		{4 * time.Second, transfer.View{Command: transfer.Exit, State: transfer.Running, Files: pending(1)},
			true, decision{want: transfer.Exiting, next: transfer.Running}},
		{5 * time.Second, transfer.View{Command: transfer.Exit, State: transfer.Running, Files: pending(1)},
			false, decision{want: transfer.Exiting, next: transfer.Exiting, recordState: true}},
	})
}

func TestDecideLeftoverExit(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		passes []pass
	}{
		{"EXIT answered by an earlier daemon: removed, STOPPED", []pass{
			{0, transfer.View{Command: transfer.Exit, State: transfer.Exiting},
				false, decision{want: transfer.Stopped, next: transfer.Stopped, recordState: true, clearExit: true, first: true}},
		}},
		{"EXIT nobody answered: obeyed", []pass{
			{0, transfer.View{Command: transfer.Exit, State: transfer.Running},
				false, decision{want: transfer.Exiting, next: transfer.Exiting, recordState: true, first: true}},
		}},
		{"EXIT after the first pass: obeyed even over EXITING", []pass{
			{0, transfer.View{State: transfer.Stopped},
				false, decision{want: transfer.Stopped, next: transfer.Stopped, recordState: true, first: true}},
			{time.Second, transfer.View{Command: transfer.Exit, State: transfer.Exiting},
				false, decision{want: transfer.Exiting, next: transfer.Exiting}},
		}},
		{"no COMMAND keeps the state; an unknown one too", []pass{
			{0, transfer.View{}, false, decision{want: transfer.Stopped, next: transfer.Stopped, recordState: true, first: true}},
			{time.Second, transfer.View{Unknown: "FLY", State: transfer.Stopped, Files: pending(1)},
				false, decision{want: transfer.Stopped, next: transfer.Stopped}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { runPasses(t, t0, tc.passes) })
	}
}

func TestDecideRefusals(t *testing.T) {
	outside := errors.New("source /x is outside the allowed source prefixes [/c]")
	spaced := errors.New("destination  /p/b\tis   refused")
	files := pending(4)
	files[0].Problem = outside                                                               // not yet recorded
	files[1].Problem, files[1].Error = spaced, transfer.ErrorValue(transfer.Refused(spaced)) // recorded, folded
	files[2].Problem, files[2].Error = outside, "an older ERROR"                             // recorded, another one
	v := transfer.View{Command: transfer.Run, State: transfer.Running, Files: files}
	dec := decide(v, coreState{state: transfer.Running, flushStarted: time.Unix(1, 0)}, time.Unix(2, 0))
	want := []refused{
		{src: files[0].Src, msg: transfer.Refused(outside), problem: outside},
		{src: files[2].Src, msg: transfer.Refused(outside), problem: outside},
	}
	if !reflect.DeepEqual(dec.refuse, want) {
		t.Errorf("refused %+v; want %+v", dec.refuse, want)
	}
	// A refused entry is pending: the flush is not DONE while it stands.
	if dec.done || dec.want != transfer.Running {
		t.Errorf("with refused entries: want %s, done %v; want RUNNING, not done", dec.want, dec.done)
	}
}

func TestCopyOnUnwritten(t *testing.T) {
	for _, tc := range []struct {
		dec  decision
		want bool
	}{
		{decision{want: transfer.Running}, true},
		{decision{want: transfer.Running, first: true}, false}, // nothing recorded yet
		{decision{want: transfer.Stopped, done: true}, false},
		{decision{want: transfer.Stopped}, false},
		{decision{want: transfer.Exiting}, false},
	} {
		if got := tc.dec.copyOnUnwritten(); got != tc.want {
			t.Errorf("%+v: copyOnUnwritten %v; want %v", tc.dec, got, tc.want)
		}
	}
}

func TestNextCopy(t *testing.T) {
	for _, tc := range []struct {
		state, want transfer.State
		copying     bool
		unwanted    string
		step        copyStep
	}{
		{transfer.Running, transfer.Running, false, "", copyPick},
		{transfer.Stopped, transfer.Stopped, false, "", copyKeep},
		{transfer.Exiting, transfer.Exiting, false, "", copyKeep},
		{transfer.Running, transfer.Running, true, "", copyKeep},
		{transfer.Running, transfer.Stopped, true, "", copyStop},
		{transfer.Running, transfer.Exiting, true, "the library removed the FILES entry", copyStop},
		{transfer.Running, transfer.Running, true, "the library removed the FILES entry", copyAbandon},
	} {
		if got := nextCopy(tc.state, tc.want, tc.copying, tc.unwanted); got != tc.step {
			t.Errorf("nextCopy(%s, want %s, copying %v, %q) = %d; want %d", tc.state, tc.want, tc.copying, tc.unwanted, got, tc.step)
		}
	}
}
