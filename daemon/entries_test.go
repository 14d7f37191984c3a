package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestRefuseConflictsComparesFiles: DESTINATIONs and sources are compared
// as the files they name, so aliases through a symbolic link, "..", or a
// directory not made yet are refused as exact duplicates are, and nothing
// may be written into the control directory or over the metrics file.
func TestRefuseConflictsComparesFiles(t *testing.T) {
	root := t.TempDir()
	pfs, cache, ctl := filepath.Join(root, "pfs"), filepath.Join(root, "cache"), filepath.Join(root, "ctl")
	for _, d := range []string{filepath.Join(pfs, "ckpt"), cache, ctl, filepath.Join(root, "mon")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(root, "pfs-link"):    pfs,
		filepath.Join(pfs, "ckpt", "up"):   pfs,
		filepath.Join(pfs, "cache-link"):   cache,
		filepath.Join(root, "ctl-link"):    ctl,
		filepath.Join(pfs, "ckpt", "mon2"): filepath.Join(root, "mon"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	transferFile := filepath.Join(ctl, "transfer.scrinfo")
	metricsFile := filepath.Join(root, "mon", "scr.prom")
	src := func(n string) string { return filepath.Join(cache, n) }
	cases := []struct {
		name  string
		dests []string // entry i copies src(i) to dests[i]
		want  []string // the refusal of each entry, "" for none
	}{
		{"distinct", []string{pfs + "/ckpt/a", pfs + "/ckpt/b"}, []string{"", ""}},
		{"exact duplicate", []string{pfs + "/ckpt/a", pfs + "/ckpt/a"}, []string{"also the DESTINATION", "also the DESTINATION"}},
		{"through a symlinked directory", []string{pfs + "/ckpt/a", root + "/pfs-link/ckpt/a"}, []string{"the same file through another path", "the same file through another path"}},
		{"through a symlink and ..", []string{pfs + "/x", pfs + "/ckpt/up/x"}, []string{"another path", "another path"}},
		{"through a directory not made yet", []string{pfs + "/new/dir/a", root + "/pfs-link/new/dir/a"}, []string{"another path", "another path"}},
		{"lexical .. is the copy's", []string{pfs + "/ckpt/../ckpt/a", pfs + "/ckpt/a"}, []string{"also the DESTINATION", "also the DESTINATION"}},
		{"another entry's source through a link", []string{pfs + "/ckpt/a", pfs + "/cache-link/e0"}, []string{"", "is the source of FILES entry " + src("e0")}},
		{"its own source through a link", []string{pfs + "/cache-link/e0"}, []string{"the entry's own source"}},
		{"the transfer file", []string{transferFile}, []string{"is the transfer file, or its instance lock or journal beside it " + transferFile}},
		{"the transfer file through a link", []string{root + "/ctl-link/transfer.scrinfo"}, []string{"the transfer file"}},
		{"the transfer file through ..", []string{pfs + "/../ctl/transfer.scrinfo"}, []string{"the transfer file"}},
		{"the lock", []string{filepath.Join(ctl, ".transfer.scrinfo.lock")}, []string{"its instance lock"}},
		{"the journal through a link", []string{root + "/ctl-link/.transfer.scrinfo.journal"}, []string{"journal"}},
		{"another file in the control directory", []string{ctl + "/a"}, []string{""}},
		{"a subdirectory of the control directory", []string{ctl + "/sub/transfer.scrinfo"}, []string{""}},
		{"the metrics file through a link", []string{pfs + "/ckpt/mon2/scr.prom"}, []string{"a file of the daemon's (or its temporary) " + metricsFile}},
		{"the metrics file's temporary", []string{root + "/mon/.scr.prom.tmp123"}, []string{"a file of the daemon's"}},
		{"beside the metrics file", []string{root + "/mon/other.prom"}, []string{""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := make([]transfer.File, len(tc.dests))
			for i, d := range tc.dests {
				files[i] = transfer.File{Src: src("e" + string(rune('0'+i))), Dest: d, Size: 1}
			}
			problems := make([]error, len(files))
			k := keyer{}
			refuseConflicts(files, problems, k, k.protect(transferFile, []string{metricsFile}))
			for i, want := range tc.want {
				switch {
				case want == "" && problems[i] != nil:
					t.Errorf("entry %d (%s) refused: %v", i, tc.dests[i], problems[i])
				case want != "" && (problems[i] == nil || !strings.Contains(problems[i].Error(), want)):
					t.Errorf("entry %d (%s): %v, want a refusal saying %q", i, tc.dests[i], problems[i], want)
				}
			}
		})
	}
}

// TestRecheck: refusals found by comparing files are worked out again
// after the retry back-off, doubling while they last and forgotten once
// none stands; a clock is passed in.
func TestRecheck(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	lo, hi := time.Second, 4*time.Second
	var r recheck
	steps := []struct {
		byFile  bool
		wantIn  time.Duration // next look this long after the step's now; 0: none
		dueJust bool          // due at exactly that instant
	}{
		{true, time.Second, true},
		{true, 2 * time.Second, true},
		{true, 4 * time.Second, true},
		{true, 4 * time.Second, true},
		{false, 0, false},
		{true, time.Second, true},
	}
	now := t0
	for i, s := range steps {
		r.after(now, s.byFile, lo, hi)
		if s.wantIn == 0 {
			if !r.at.IsZero() || r.due(now.Add(time.Hour)) {
				t.Fatalf("step %d: a look scheduled (%v) with no refusal by file", i, r.at)
			}
			continue
		}
		if got := r.at.Sub(now); got != s.wantIn {
			t.Fatalf("step %d: next look in %v, want %v", i, got, s.wantIn)
		}
		if r.due(now.Add(s.wantIn-time.Nanosecond)) || r.due(now.Add(s.wantIn)) != s.dueJust {
			t.Fatalf("step %d: due before its time, or not at it", i)
		}
		now = r.at
	}
	files := []transfer.File{{Src: "/c/a", Dest: "/p/x", Size: 1}, {Src: "/c/b", Dest: "/p/x", Size: 1}}
	k := keyer{}
	if !refuseConflicts(files, make([]error, 2), k, k.protect("/ctl/t", nil)) {
		t.Fatal("a duplicate DESTINATION not reported as refused by comparing files")
	}
	files[1].Dest = "/p/y"
	if refuseConflicts(files, make([]error, 2), k, k.protect("/ctl/t", nil)) {
		t.Fatal("distinct DESTINATIONs reported as refused")
	}
}
