package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestDestinationAliasesRefused: DESTINATIONs are compared as the files
// they name. Entries whose DESTINATIONs differ as strings but name one file
// (through a symlinked directory, or ".."), or that name another entry's
// source, the transfer file, its lock or journal, or the metrics file, get
// an ERROR and are never recorded complete; what they name is left as it
// was, and the sound entry beside them is flushed.
func TestDestinationAliasesRefused(t *testing.T) {
	type entry struct{ name, dest, wantErr string }
	cases := []struct {
		name    string
		entries func(n *node) []entry
	}{
		{"one file through a symlinked directory", func(n *node) []entry {
			return []entry{
				{"a", n.dest("x.ckpt"), "the same file through another path"},
				{"b", filepath.Join(n.root, "pfs-link", "ckpt.1", "x.ckpt"), "the same file through another path"},
			}
		}},
		{"another entry's source through a link", func(n *node) []entry {
			return []entry{{"b", filepath.Join(n.pfs, "cache-link", "ok.ckpt"), "is the source of FILES entry"}}
		}},
		{"the transfer file", func(n *node) []entry {
			return []entry{{"a", n.transfer, "is the transfer file"}}
		}},
		{"the transfer file through a symlink", func(n *node) []entry {
			return []entry{{"a", filepath.Join(n.root, "ctl-link", "transfer.scrinfo"), "is the transfer file"}}
		}},
		{"the transfer file through ..", func(n *node) []entry {
			return []entry{{"a", filepath.Join(n.pfs, "ckpt.1") + "/../../ctl/transfer.scrinfo", "is the transfer file"}}
		}},
		{"the lock file", func(n *node) []entry {
			return []entry{{"a", instance.LockPath(n.transfer), "its instance lock"}}
		}},
		{"the journal", func(n *node) []entry {
			return []entry{{"a", hashfile.JournalPath(n.transfer), "journal"}}
		}},
		{"the metrics file through a symlink", func(n *node) []entry {
			return []entry{{"a", filepath.Join(n.root, "mon-link", "scr.prom"), "a file of the daemon's"}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			mon := filepath.Join(n.root, "mon")
			must(t, os.MkdirAll(filepath.Join(n.pfs, "ckpt.1"), 0o755))
			must(t, os.Mkdir(mon, 0o755))
			must(t, os.Symlink(n.pfs, filepath.Join(n.root, "pfs-link")))
			must(t, os.Symlink(n.cache, filepath.Join(n.pfs, "cache-link")))
			must(t, os.Symlink(filepath.Dir(n.transfer), filepath.Join(n.root, "ctl-link")))
			must(t, os.Symlink(mon, filepath.Join(n.root, "mon-link")))
			okSrc, okData := n.checkpoint("ok.ckpt", 300000)
			n.add(okSrc, n.dest("ok.ckpt"))
			srcs := map[string][]byte{}
			ents := tc.entries(n)
			for _, e := range ents {
				src, data := n.checkpoint(e.name+".in", 200000)
				srcs[src] = data
				n.add(src, e.dest)
			}
			n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
			d := n.start("--metrics-file=" + filepath.Join(mon, "scr.prom"))
			v := n.waitFor("the sound entry flushed and every alias refused", settle, func(v transfer.View) bool {
				ok, _ := file(v, okSrc)
				if ok.Written != ok.Size || !ok.HasCRC {
					return false
				}
				for src := range srcs {
					if f, _ := file(v, src); f.Error == "" {
						return false
					}
				}
				return true
			})
			sameFile(t, n.dest("ok.ckpt"), okData)
			sameFile(t, okSrc, okData)
			for i, e := range ents {
				src := filepath.Join(n.cache, e.name+".in")
				f, _ := file(v, src)
				if !strings.Contains(f.Error, e.wantErr) {
					t.Errorf("entry %d (%s): ERROR %q, want one saying %q", i, e.dest, f.Error, e.wantErr)
				}
				if f.Written != 0 || f.HasCRC {
					t.Errorf("entry %d (%s): WRITTEN %d, CRC %v recorded for a refused entry", i, e.dest, f.Written, f.HasCRC)
				}
				if b, err := os.ReadFile(e.dest); err == nil && string(b) == string(srcs[src]) {
					t.Errorf("entry %d: %s was written with its bytes", i, e.dest)
				}
			}
			if v.Done {
				t.Error("DONE recorded with entries in error")
			}
			// The lock still excludes.
			second := n.start()
			if code := second.Wait(settle); code == 0 {
				t.Error("a second daemon started beside the first")
			}
			if !d.Alive() {
				t.Error("the daemon died")
			}
		})
	}
}
