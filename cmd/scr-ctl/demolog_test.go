package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/internal/units"
)

// TestDemoLogAsTheDaemons: the demo's scr-transferd.log is written by the
// daemon's logger (sizes in IEC units, not raw numbers), and the SIONlib
// container's "flushed" line counts its data bytes, not the holes between
// its chunks, in what it copied and its rate.
func TestDemoLogAsTheDaemons(t *testing.T) {
	r := demoRun(t, "--dir", t.TempDir())
	wantCode(t, r, 0, "demo")
	root := demoRoot(t, r.stdout)
	b, err := os.ReadFile(filepath.Join(root, "scr-transferd.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	sion := filepath.Join(root, "cache", "scr.demo", "dataset.1", "rank_0.sion")
	rep, err := cache.Inspect(t.Context(), sion)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DataBytes >= rep.Size {
		t.Fatalf("the SIONlib sample has no holes (%d of %d bytes data)", rep.DataBytes, rep.Size)
	}
	var flushed string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "\tflushed\t") && strings.Contains(l, sion) {
			flushed = l
		}
	}
	if flushed == "" {
		t.Fatalf("no flushed line for %s:\n%s", sion, log)
	}
	want := `"copied": "` + units.IEC(float64(rep.DataBytes)) + `"`
	if !strings.Contains(flushed, want) || !strings.Contains(flushed, `"size": "`+units.IEC(float64(rep.Size))+`"`) {
		t.Errorf("flushed line %s\nwant %s (the data bytes) and the size in IEC units", flushed, want)
	}
	if m := regexp.MustCompile(`"(size|copied|from)": \d`).FindString(log); m != "" {
		t.Errorf("a raw byte count in the log: %s", m)
	}
}
