package transfer

import (
	"os"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

func TestReadLibraryFile(t *testing.T) {
	tree, err := hashfile.NewStore(shareddata.File(t, "kvtree", "transfer_library.scrinfo"), hashfile.Flock).Read()
	if err != nil {
		t.Fatal(err)
	}
	v := Read(tree)
	if v.Command != Run || v.State != Stopped || v.Done || v.BW != 52428800 || v.BWBad || v.Percent != 0 {
		t.Fatalf("view: %+v", v)
	}
	if len(v.Files) != 2 || len(v.Problems) != 0 {
		t.Fatalf("files %d, problems %v", len(v.Files), v.Problems)
	}
	want := File{
		Src:  "/tmp/user1/scr.1001186/index.0/dataset.1/rank_0.ckpt",
		Dest: "/p/lscratchb/user1/simulation123/scr.dataset.1/rank_0.ckpt",
		Size: 524294,
	}
	var got File
	for _, f := range v.Files {
		if f.Src == want.Src {
			got = f
		}
	}
	if got != want {
		t.Fatalf("file: %+v, want %+v", got, want)
	}
	if size, written := v.Totals(); size != 524294+124 || written != 0 {
		t.Fatalf("totals %d %d", size, written)
	}
	if next, done := Next(v, Stopped, false); next != Running || done {
		t.Fatalf("RUN with pending files: %s %v", next, done)
	}
}

func TestReadDoneFile(t *testing.T) {
	raw, err := os.ReadFile(shareddata.File(t, "kvtree", "transfer_done_by_scr_transfer.scrinfo"))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := hashfile.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	v := Read(tree)
	if !v.Done || v.HasPending() || v.State != Stopped {
		t.Fatalf("a flush done by scr_transfer: %+v", v)
	}
	if next, done := Next(v, Stopped, false); next != Stopped || done {
		t.Fatalf("RUN with DONE must rest: %s %v", next, done)
	}
}

func TestHostileValues(t *testing.T) {
	tree, err := hashfile.Parse(strings.NewReader(`
BW
  fast
PERCENT
  -20
COMMAND
  RUN
  STOP
FILES
  /c/a
    DESTINATION
      /p/a
    SIZE
      12x
  /c/b
    SIZE
      5
  /c/c
    DESTINATION
      /p/c
    SIZE
      99999999999999999999
  /c/d
    DESTINATION
      /p/d
    SIZE
      10
    WRITTEN
      -1
  /c/e
    DESTINATION
      /p/e
    SIZE
      10
`))
	if err != nil {
		t.Fatal(err)
	}
	v := Read(tree)
	if !v.BWBad || !v.PercentBad || v.Command != None || len(v.Problems) != 3 {
		t.Fatalf("top level: BWBad=%v PercentBad=%v cmd=%q problems=%v", v.BWBad, v.PercentBad, v.Command, v.Problems)
	}
	wantProblems := map[string]string{
		"/c/a": `"12x" is not an unsigned decimal number`,
		"/c/b": "no DESTINATION",
		"/c/c": `"99999999999999999999" is not an unsigned decimal number`,
		"/c/d": `"-1" is not an unsigned decimal number`,
		"/c/e": "",
	}
	for _, f := range v.Files {
		want := wantProblems[f.Src]
		switch {
		case want == "" && f.Problem != nil:
			t.Errorf("%s: unexpected problem %v", f.Src, f.Problem)
		case want != "" && (f.Problem == nil || !strings.Contains(f.Problem.Error(), want)):
			t.Errorf("%s: problem %v, want %q", f.Src, f.Problem, want)
		}
		if !f.Pending() {
			t.Errorf("%s must count as pending", f.Src)
		}
	}
}

func TestNext(t *testing.T) {
	pending := View{Files: []File{{Src: "/a", Dest: "/b", Size: 10, Written: 3}}}
	complete := View{Files: []File{{Src: "/a", Dest: "/b", Size: 10, Written: 10}}}
	with := func(v View, c Command, done bool) View { v.Command, v.Done = c, done; return v }
	tests := []struct {
		name     string
		v        View
		current  State
		busy     bool
		want     State
		wantDone bool
	}{
		{"run pending", with(pending, Run, false), Stopped, false, Running, false},
		{"run complete idle", with(complete, Run, false), Running, false, Stopped, true},
		{"run complete busy", with(complete, Run, false), Running, true, Running, false},
		{"run no files", with(View{}, Run, false), Stopped, false, Stopped, true},
		{"run done", with(pending, Run, true), Running, false, Stopped, false},
		{"stop", with(pending, Stop, false), Running, true, Stopped, false},
		{"exit", with(pending, Exit, false), Running, false, Exiting, false},
		{"none keeps", with(pending, None, false), Running, false, Running, false},
		{"none from scratch", with(pending, None, false), "", false, Stopped, false},
		{"unknown keeps", View{Unknown: "FLY", Files: pending.Files}, Running, false, Running, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, done := Next(tc.v, tc.current, tc.busy)
			if got != tc.want || done != tc.wantDone {
				t.Fatalf("Next = %s, %v; want %s, %v", got, done, tc.want, tc.wantDone)
			}
		})
	}
}

func TestEdits(t *testing.T) {
	tree := hashfile.New()
	AddFile(tree, "/c/a", "/p/a", 100)
	SetCommand(tree, Run)
	SetBW(tree, 1e6)
	SetPercent(tree, 20)
	SetState(tree, Running)
	f := Read(tree).Files[0]
	if !SetWritten(tree, f, 40) || !SetError(tree, f.Src, "no space\n left") || !SetCRC(tree, f, 0xdeadbeef) {
		t.Fatal("edits on a present entry failed")
	}
	SetDone(tree, true)
	want := "FILES\n  /c/a\n    DESTINATION\n      /p/a\n    SIZE\n      100\n    WRITTEN\n      40\n    ERROR\n      no space left\n    CRC\n      0xdeadbeef\n" +
		"COMMAND\n  RUN\nBW\n  1000000.000000\nPERCENT\n  20.000000\nSTATE\n  RUNNING\nFLAG\n  DONE\n"
	if got := hashfile.Format(tree, 0); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	SetCommand(tree, Run)
	if tree.Has(KeyFlag) {
		t.Fatal("RUN must clear FLAG DONE")
	}
	SetError(tree, f.Src, "")
	if tree.Lookup(KeyFiles, f.Src, KeyError) != nil {
		t.Fatal("error not cleared")
	}
	AddFile(tree, "/c/a", "/p/other", 100) // the library replaced the entry
	if SetWritten(tree, f, 100) || SetCRC(tree, f, 1) {
		t.Fatal("progress recorded on a replaced entry")
	}
	tree.Get(KeyFiles).Unset("/c/a")
	if SetWritten(tree, f, 100) || SetError(tree, f.Src, "x") {
		t.Fatal("progress recorded on a removed entry")
	}
}

// SetComplete makes the same record as SetWrittenFrom to SIZE, SetCRC,
// SetError("") and SetWarning together, and, like SetWrittenFrom, none at
// all on an entry that no longer holds what the copy last recorded.
func TestSetComplete(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*hashfile.Tree, File) // the library's doing, before the record
		prev    int64
		warning string
		ok      bool
	}{
		{"fresh entry", nil, 0, "", true},
		{"with a warning", nil, 0, "stale tail\n flushed", true},
		{"ERROR and WARNING from an earlier try", func(tr *hashfile.Tree, f File) {
			SetError(tr, f.Src, "no space")
			SetWarning(tr, f.Src, "old")
		}, 0, "", true},
		{"resumed from a recorded WRITTEN", func(tr *hashfile.Tree, f File) { SetWritten(tr, f, 40) }, 40, "", true},
		{"WRITTEN reset by the library", func(tr *hashfile.Tree, f File) { SetWritten(tr, f, 0) }, 40, "", false},
		{"entry replaced", func(tr *hashfile.Tree, f File) { AddFile(tr, f.Src, "/p/other", f.Size) }, 0, "", false},
		{"entry removed", func(tr *hashfile.Tree, f File) { tr.Get(KeyFiles).Unset(f.Src) }, 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func() (*hashfile.Tree, File) {
				tr := hashfile.New()
				AddFile(tr, "/c/a", "/p/a", 100)
				f := Read(tr).Files[0]
				if tc.edit != nil {
					tc.edit(tr, f)
				}
				return tr, f
			}
			got, f := mk()
			before := hashfile.Format(got, 0)
			if ok := SetComplete(got, f, tc.prev, 0xdeadbeef, tc.warning); ok != tc.ok {
				t.Fatalf("SetComplete = %v, want %v", ok, tc.ok)
			}
			if !tc.ok {
				if after := hashfile.Format(got, 0); after != before {
					t.Fatalf("refused, yet changed the tree:\n%s\nwas\n%s", after, before)
				}
				return
			}
			want, _ := mk()
			SetWrittenFrom(want, f, tc.prev, f.Size)
			SetCRC(want, f, 0xdeadbeef)
			SetError(want, f.Src, "")
			SetWarning(want, f.Src, tc.warning)
			if g, w := hashfile.Format(got, 0), hashfile.Format(want, 0); g != w {
				t.Fatalf("got\n%s\nwant\n%s", g, w)
			}
			if v := Read(got).Files[0]; v.Written != f.Size || v.Error != "" {
				t.Fatalf("WRITTEN %d, ERROR %q after SetComplete", v.Written, v.Error)
			}
		})
	}
}
