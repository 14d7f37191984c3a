package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// copyIn copies a shared sample into the node's cache.
func (n *node) copyIn(sub, name string) (string, []byte) {
	n.t.Helper()
	data, err := os.ReadFile(shareddata.File(n.t, sub, name))
	if err != nil {
		n.t.Fatal(err)
	}
	p := filepath.Join(n.cache, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		n.t.Fatal(err)
	}
	return p, data
}

func TestCorruptCheckpointsAreNotFlushed(t *testing.T) {
	n := newNode(t)
	type sample struct{ sub, name, code string }
	samples := []sample{
		{"ftiff", "Ckpt4-Rank1.data-flip.fti", "E_CHUNK_HASH"},
		{"ftiff", "Ckpt5-Rank0.meta-flip.fti", "E_META_HASH"},
		{"ftiff", "Ckpt6-Rank0.truncated.fti", "E_META_HASH"},
		{"lime", "damaged_bitflip_su3_4x4x4x8_f.lime", "E_CHECKSUM"},
		{"sion", "bad_meta2_offset.sion", "E_META2_OUT_OF_BOUNDS"},
		{"ftiff", "Ckpt4-Rank1.fti", ""},
		{"lime", "su3_4x4x4x8_f.lime", ""},
	}
	srcs := map[string]sample{}
	data := map[string][]byte{}
	for _, s := range samples {
		p, b := n.copyIn(s.sub, s.name)
		srcs[p], data[p] = s, b
		n.add(p, n.dest(s.name))
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	d := n.start()
	v := n.waitFor("a verdict on every file", settle, func(v transfer.View) bool {
		for _, f := range v.Files {
			if srcs[f.Src].code != "" && f.Error == "" || srcs[f.Src].code == "" && !(f.Written == f.Size && f.HasCRC) {
				return false
			}
		}
		return true
	})
	if v.Done {
		t.Fatal("DONE with corrupt checkpoints")
	}
	for _, f := range v.Files {
		s := srcs[f.Src]
		if s.code == "" {
			sameFile(t, f.Dest, data[f.Src])
			continue
		}
		if !strings.Contains(f.Error, s.code) || !strings.Contains(f.Error, s.name) {
			t.Errorf("%s: ERROR %q should name the file and %s", s.name, f.Error, s.code)
		}
		if f.Written != 0 {
			t.Errorf("%s: WRITTEN %d for a corrupt checkpoint", s.name, f.Written)
		}
		if _, err := os.Stat(f.Dest); err == nil {
			t.Errorf("%s: a corrupt checkpoint reached the PFS", s.name)
		}
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}

// sparseCopy re-creates a shared SION sample in the cache with its holes,
// keeping only the data ranges cache.Inspect reports.
func sparseCopy(t *testing.T, n *node, name string) (string, []byte, *cache.Report) {
	t.Helper()
	p, full := n.copyIn("sion", name)
	rep, err := cache.Inspect(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(p))
	f, err := os.Create(p)
	must(t, err)
	for _, r := range rep.Ranges {
		if _, err := f.WriteAt(full[r.Off:r.End()], r.Off); err != nil {
			t.Fatal(err)
		}
	}
	must(t, f.Truncate(int64(len(full))))
	must(t, f.Close())
	return p, full, rep
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

func TestSIONFlushKeepsHoles(t *testing.T) {
	// With verification before the copy, a SION container is copied as its
	// data ranges even when the source itself has no holes (as after a
	// plain cp or a git checkout).
	for _, tc := range []struct {
		verify string
		sparse bool
	}{{"before", true}, {"both", true}, {"before", false}} {
		t.Run(fmt.Sprintf("verify=%s,sparse_source=%v", tc.verify, tc.sparse), func(t *testing.T) {
			verify := tc.verify
			n := newNode(t)
			names := []string{"sparse_4t_bigchunk.sion", "multiblk_4t_serial.sion", "multifile_6t_2f.sion", "multifile_6t_2f.sion.000001"}
			type want struct {
				data []byte
				rep  *cache.Report
			}
			wants := map[string]want{}
			for _, name := range names {
				p, full, rep := sparseCopy(t, n, name)
				if !tc.sparse {
					must(t, os.WriteFile(p, full, 0o644))
				}
				wants[p] = want{full, rep}
				n.add(p, n.dest(name))
			}
			n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
			n.start("--verify=" + verify)
			v := n.waitFor("DONE", settle, done)
			var st syscall.Statfs_t
			must(t, syscall.Statfs(n.pfs, &st))
			for _, f := range v.Files {
				w := wants[f.Src]
				got, err := os.ReadFile(f.Dest)
				must(t, err)
				if !bytes.Equal(got, w.data) {
					t.Fatalf("%s differs from the source", f.Dest)
				}
				limit := w.rep.DataBytes + int64(len(w.rep.Ranges))*st.Bsize
				if a := allocated(t, f.Dest); a > limit {
					t.Errorf("%s: %d bytes allocated for %d data bytes in %d ranges (limit %d)", filepath.Base(f.Dest), a, w.rep.DataBytes, len(w.rep.Ranges), limit)
				} else {
					t.Logf("%s: %d bytes allocated of %d apparent (%d data bytes, %d ranges)", filepath.Base(f.Dest), a, len(w.data), w.rep.DataBytes, len(w.rep.Ranges))
				}
			}
		})
	}
}

func TestVerifyAfterFlushesSoundFiles(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 5*mib+3)
	n.add(p, n.dest("a.ckpt"))
	q, fti := n.copyIn("ftiff", "Ckpt5-Rank0.fti")
	n.add(q, n.dest("Ckpt5-Rank0.fti"))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	n.start("--verify=after")
	n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("a.ckpt"), data)
	sameFile(t, n.dest("Ckpt5-Rank0.fti"), fti)
}
