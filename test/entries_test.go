package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestImpossibleEntriesRefused: entries that cannot all be true at once are
// refused with an ERROR naming the conflict, and nothing is written for
// them, while the sound entries are flushed.
func TestImpossibleEntriesRefused(t *testing.T) {
	n := newNode(t)
	dupA, _ := n.checkpoint("dupA.ckpt", 300*1024)
	dupB, _ := n.checkpoint("dupB.ckpt", 200*1024)
	suffix, _ := n.checkpoint("suffix.ckpt", 1000)
	victim, victimData := n.checkpoint("victim.ckpt", 50*1024)
	overwriter, _ := n.checkpoint("overwriter.ckpt", 60*1024)
	fine, fineData := n.checkpoint("fine.ckpt", 70*1024)
	shared := n.dest("shared.ckpt")
	n.add(dupA, shared)
	n.add(dupB, shared)
	n.add(suffix, n.dest(".suffix.ckpt.scrpart"))
	n.add(victim, n.dest("victim.ckpt"))
	n.add(overwriter, victim) // would overwrite another entry's source
	n.add(fine, n.dest("fine.ckpt"))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	d := n.start()

	want := map[string]string{
		dupA:       "is also the DESTINATION of FILES entry " + dupB,
		dupB:       "is also the DESTINATION of FILES entry " + dupA,
		suffix:     "ends in .scrpart",
		overwriter: "is the source of FILES entry " + victim,
	}
	v := n.waitFor("the sound files flushed and the others refused", settle, func(v transfer.View) bool {
		for src := range want {
			if f, _ := file(v, src); f.Error == "" {
				return false
			}
		}
		for _, src := range []string{victim, fine} {
			if f, _ := file(v, src); f.Pending() {
				return false
			}
		}
		return true
	})
	for src, msg := range want {
		f, _ := file(v, src)
		if !strings.Contains(f.Error, msg) {
			t.Errorf("%s: ERROR %q should say %q", src, f.Error, msg)
		}
		if f.Written != 0 || f.HasCRC {
			t.Errorf("%s: refused entry recorded WRITTEN %d CRC %v", src, f.Written, f.HasCRC)
		}
	}
	if v.Done {
		t.Error("FLAG DONE set with refused entries")
	}
	checkFlushed(t, v, map[string][]byte{victim: victimData, fine: fineData})
	sameFile(t, victim, victimData) // the source was not overwritten
	if _, err := os.Stat(shared); err == nil {
		t.Errorf("%s written although two entries claim it", shared)
	}
	if _, err := os.Stat(n.dest(".suffix.ckpt.scrpart")); err == nil {
		t.Error("a DESTINATION with the partial-copy suffix was written")
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}

// TestRefusalLoggedOnce: a refused entry whose path holds a double space, a
// tab or a line break is logged once, although the recorded ERROR folds
// white space; the daemon goes on with other work meanwhile.
func TestRefusalLoggedOnce(t *testing.T) {
	n := newNode(t)
	bad := []string{"rel  double/a.ckpt", "rel\ttab/b.ckpt", "rel\nline/c.ckpt"}
	n.library(func(tr *hashfile.Tree) {
		for i, src := range bad {
			transfer.AddFile(tr, src, n.dest(filepath.Base(src))+string(rune('0'+i)), 10)
		}
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start()
	n.waitFor("ERRORs recorded", settle, func(v transfer.View) bool {
		for _, src := range bad {
			if f, _ := file(v, src); f.Error == "" {
				return false
			}
		}
		return true
	})
	// Give the daemon passes to do: flush a few files one after another,
	// each added once the previous one is complete.
	for i := range 3 {
		name := "later" + string(rune('0'+i)) + ".ckpt"
		src, data := n.checkpoint(name, 100*1024)
		n.add(src, n.dest(name))
		v := n.waitFor(name+" flushed", settle, func(v transfer.View) bool {
			f, _ := file(v, src)
			return !f.Pending()
		})
		checkFlushed(t, v, map[string][]byte{src: data})
	}
	if got := strings.Count(d.Log.String(), "refused FILES entry"); got != len(bad) {
		t.Fatalf("%d refusals logged, want %d (one per entry):\n%s", got, len(bad), d.Log.String())
	}
}
