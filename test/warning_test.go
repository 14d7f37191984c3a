package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestCheckpointWarningsSurface: a checkpoint sound enough to flush that an
// operator should look at (an FTI-FF file FTI 1.6 refuses on restart) is
// flushed, and its warning reaches the log once, the transfer file's
// WARNING (so scr-ctl status shows it) and the metrics file.
func TestCheckpointWarningsSurface(t *testing.T) {
	n := newNode(t)
	warn, warnData := n.copyIn("ftiff", "Ckpt7-Rank1.fti")
	plain, plainData := n.copyIn("ftiff", "Ckpt4-Rank1.fti")
	n.add(warn, n.dest("Ckpt7-Rank1.fti"))
	n.add(plain, n.dest("Ckpt4-Rank1.fti"))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	prom := filepath.Join(n.root, "scr.prom")
	d := n.start("--verify=before", "--metrics-file="+prom)
	v := n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("Ckpt7-Rank1.fti"), warnData)
	sameFile(t, n.dest("Ckpt4-Rank1.fti"), plainData)
	w, _ := file(v, warn)
	p, _ := file(v, plain)
	if !strings.Contains(w.Warning, "FTI 1.6 will reject this checkpoint") || p.Warning != "" {
		t.Errorf("WARNINGs %q and %q: want the FTI 1.6 warning on %s only", w.Warning, p.Warning, warn)
	}
	// A new flush request (the library clears DONE) finds nothing to copy
	// and must not log the warning again.
	n.library(func(tr *hashfile.Tree) {
		transfer.SetDone(tr, false)
		transfer.SetCommand(tr, transfer.Run)
	})
	n.waitFor("DONE again", settle, done)
	if got := strings.Count(d.Log.String(), "checkpoint flushed with a warning"); got != 1 {
		t.Errorf("the warning was logged %d times, want once:\n%s", got, d.Log.String())
	}
	out, err := exec.Command(bins.Path(t, testenv.Ctl), "status", n.transfer).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "WARNING: FTI 1.6 will reject") {
		t.Errorf("scr-ctl status (%v) does not show the warning:\n%s", err, out)
	}
	n.waitFor("the metrics file to count the warned file", settle, func(transfer.View) bool {
		b, _ := os.ReadFile(prom)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "scr_transferd_files_with_warnings{") && strings.HasSuffix(line, "} 1") {
				return true
			}
		}
		return false
	})
}
