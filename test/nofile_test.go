package test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestDescriptorsBoundedByLimit flushes 300 small files, each into a
// directory of its own, with the daemon's RLIMIT_NOFILE at 32 and at 64
// (soft and hard, so that the Go runtime cannot raise it). A group of a
// batch holds a descriptor per partial copy and per directory until it is
// durable; the groups must stay within the limit whatever the layout: no
// ERROR recorded at any time, and every file byte-exact.
func TestDescriptorsBoundedByLimit(t *testing.T) {
	testenv.Long(t, "batches of files under several descriptor limits")
	for _, limit := range []int{32, 64} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			n := newNode(t)
			srcs := map[string][]byte{}
			for i := range 300 {
				name := fmt.Sprintf("r%03d.ckpt", i)
				src, data := n.checkpoint(name, 4<<10)
				srcs[src] = data
				n.add(src, filepath.Join(n.pfs, "ckpt.1", fmt.Sprintf("rank%03d", i), name))
			}
			n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
			cmd := exec.Command("prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--",
				bins.Path(t, testenv.Daemon), "--retry-min=100ms", "--retry-max=500ms", n.transfer)
			testenv.Start(n.t, cmd)
			var errs []string
			v := n.waitFor("DONE", 3*settle, func(v transfer.View) bool {
				for _, f := range v.Files {
					if f.Error != "" && len(errs) < 3 {
						errs = append(errs, f.Src+": "+f.Error)
					}
				}
				return done(v)
			})
			if len(errs) > 0 {
				t.Errorf("ERROR recorded under RLIMIT_NOFILE %d: %q", limit, errs)
			}
			checkFlushed(t, v, srcs)
		})
	}
}
