package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// repairFixture is a transfer file in the middle of a flush, of files
// that exist: two complete with their CRC, one half copied, three
// waiting; FLAG DONE from an earlier flush, a FLUSH record, BW.
func repairFixture(t *testing.T, dir string) []byte {
	t.Helper()
	tr := hashfile.New()
	transfer.SetCommand(tr, transfer.Run)
	transfer.SetState(tr, transfer.Running)
	transfer.SetBW(tr, 64<<20)
	for i := range 6 {
		f := transfer.File{Src: filepath.Join(dir, "cache", fmt.Sprintf("rank_%d.ckpt", i)),
			Dest: filepath.Join(dir, "pfs", fmt.Sprintf("rank_%d.ckpt", i)), Size: int64(4096 * (i + 1))}
		writeFile(t, f.Src, int(f.Size), uint32(i))
		transfer.AddFile(tr, f.Src, f.Dest, f.Size)
		switch {
		case i < 2:
			transfer.SetWritten(tr, f, f.Size)
			transfer.SetCRC(tr, f, uint32(i))
		case i == 2:
			transfer.SetWritten(tr, f, f.Size/2)
		}
	}
	transfer.SetDone(tr, true)
	transfer.BeginFlush(tr, time.Now().Add(-time.Minute), 0)
	return hashfile.Encode(tr)
}

// TestRepair: several kinds of corruption; each makes status and print
// fail with a pointer to repair; repair --dry-run writes nothing; repair
// keeps what decodes, drops the entry decoding stopped in, resets the
// progress it cannot vouch for, keeps the corrupt file beside it; then
// print and status work, and a daemon serves the repaired file to the end.
func TestRepair(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(b []byte) []byte
		problem string
		keep    int // FILES entries kept
	}{
		// The most dangerous kind: rank_2's WRITTEN 6144 now reads 7144,
		// bytes the daemon never copied; the file decodes all the same.
		{"a changed digit in WRITTEN", func(b []byte) []byte {
			b[bytes.Index(b, []byte("\x006144\x00"))+1] = '7'
			return b
		}, "CRC mismatch", 6},
		{"truncated in the middle of FILES", func(b []byte) []byte {
			return b[:bytes.Index(b, []byte("rank_4.ckpt"))+20]
		}, "size mismatch", 4},
		{"an element count gone wild", func(b []byte) []byte {
			i := bytes.Index(b, []byte("rank_3.ckpt\x00"))
			i += len("rank_3.ckpt\x00")
			copy(b[i:], []byte{0xff, 0xff, 0xff, 0xf0})
			return b
		}, "CRC mismatch", 3},
		{"a damaged header", func(b []byte) []byte {
			copy(b, []byte{0xde, 0xad, 0xbe, 0xef})
			return b
		}, "bad magic", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tf := filepath.Join(dir, "transfer.scrinfo")
			img := repairFixture(t, dir)
			bad := tc.corrupt(bytes.Clone(img))
			if err := os.WriteFile(tf, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, cmd := range [][]string{{"status", tf}, {"print", tf}, {"run", tf}} {
				r := inproc(ctx, cmd...)
				wantCode(t, r, exitFailure, cmd[0]+" of a corrupt file")
				wantIn(t, r.stderr, "the file is corrupt: 'scr-ctl repair --dry-run "+tf+"'", cmd[0]+" of a corrupt file")
			}
			r := inproc(ctx, "repair", "--dry-run", tf)
			wantCode(t, r, exitOK, "repair --dry-run")
			wantIn(t, r.stdout, "problem: "+tc.problem, "repair --dry-run")
			if got, _ := os.ReadFile(tf); !bytes.Equal(got, bad) {
				t.Fatal("repair --dry-run changed the file")
			}

			r = inproc(ctx, "repair", tf)
			wantCode(t, r, exitOK, "repair")
			wantIn(t, r.stdout, tf+": problem: "+tc.problem, "repair says what was wrong")
			wantIn(t, r.stdout, fmt.Sprintf("kept: %d FILES entries, COMMAND RUN, STATE RUNNING, BW 64.0 MiB/s", tc.keep), "repair says what it kept")
			backup := strings.TrimSpace(strings.SplitN(strings.SplitN(r.stdout, "the corrupt file is kept as ", 2)[1], "\n", 2)[0])
			if got, err := os.ReadFile(backup); err != nil || !bytes.Equal(got, bad) {
				t.Fatalf("backup %s: %v, or not the corrupt bytes", backup, err)
			}
			v := readView(t, tf)
			if len(v.Files) != tc.keep || v.Done || !v.Flush.Started.IsZero() {
				t.Fatalf("repaired: %d files (want %d), DONE %v, FLUSH %+v", len(v.Files), tc.keep, v.Done, v.Flush)
			}
			for _, f := range v.Files {
				if f.Written != 0 || f.HasCRC {
					t.Fatalf("repaired entry %s keeps WRITTEN %d, CRC %v", f.Src, f.Written, f.HasCRC)
				}
			}
			for _, cmd := range [][]string{{"print", tf}, {"status", tf}} {
				wantCode(t, inproc(ctx, cmd...), exitOK, cmd[0]+" of the repaired file")
			}
			r = inproc(ctx, "repair", tf)
			wantCode(t, r, exitOK, "repair of a sound file")
			wantIn(t, r.stdout, "decodes: nothing to repair", "repair of a sound file")

			// A daemon serves it: the files it kept are copied, whole.
			startDaemon(t, tf)
			wantCode(t, ctl(t, "run", tf), 0, "run")
			wantCode(t, ctl(t, "wait", "--timeout=2m", "--grace=1m", tf), 0, "wait")
			for _, f := range readView(t, tf).Files {
				if strings.HasPrefix(f.Src, filepath.Join(dir, "cache")+"/") {
					sameFile(t, f.Src, f.Dest)
				}
			}
		})
	}
}

// FuzzSalvage: any bytes salvage without a panic into a tree that encodes
// and decodes back to itself; a sound image salvages to exactly its tree,
// with nothing to report.
func FuzzSalvage(f *testing.F) {
	tr := hashfile.New()
	transfer.AddFile(tr, "/c/a", "/p/a", 10)
	transfer.SetCommand(tr, transfer.Run)
	img := hashfile.Encode(tr)
	f.Add(img)
	f.Add(img[:len(img)/2])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := salvage(b)
		back, err := hashfile.Decode(hashfile.Encode(s.tree))
		if err != nil || !back.Equal(s.tree) {
			t.Fatalf("the salvaged tree does not survive encoding: %v", err)
		}
		if want, err := hashfile.Decode(b); err == nil && len(b) > 0 {
			if !want.Equal(s.tree) || len(s.problems)+len(s.dropped) > 0 || s.cut != nil {
				t.Fatalf("a sound image salvaged differently: %+v", s)
			}
		}
	})
}
