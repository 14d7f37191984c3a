package cache

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

// sampleVerdict is what the README of a shared test-data folder says a
// verifier must conclude about one file.
type sampleVerdict struct {
	file       string
	kind       Kind
	code       string   // "" for a sound file
	offset     int64    // expected FormatError offset, or -1 to skip
	msg        []string // fragments the message or Detail must contain
	ranges     []Range  // SION: the ranges the README lists
	companions []string // base names
	warning    string   // fragment of the one expected warning
}

func checkSamples(t *testing.T, sub string, verdicts []sampleVerdict) {
	dir := shareddata.Dir(t, sub)
	for _, v := range verdicts {
		t.Run(v.file, func(t *testing.T) {
			path := filepath.Join(dir, v.file)
			rep, err := Inspect(context.Background(), path)
			text := ""
			if v.code != "" {
				fe := wantCode(t, rep, err, v.kind, v.code)
				if v.offset >= 0 && fe.Offset != v.offset {
					t.Errorf("offset %d, want %d", fe.Offset, v.offset)
				}
				text = fe.Error()
				t.Log(text)
			} else {
				wantValid(t, rep, err, v.kind)
				text = rep.Detail
				if v.ranges != nil && !slices.Equal(rep.Ranges, v.ranges) {
					t.Errorf("ranges\n got %v\nwant %v", rep.Ranges, v.ranges)
				}
				var comps []string
				for _, c := range rep.Companions {
					if filepath.Dir(c) != dir {
						t.Errorf("companion %q is not an absolute path beside the file", c)
					}
					comps = append(comps, filepath.Base(c))
				}
				if !slices.Equal(comps, v.companions) {
					t.Errorf("companions %q, want %q", comps, v.companions)
				}
				switch {
				case v.warning == "" && len(rep.Warnings) > 0:
					t.Errorf("unexpected warnings %q", rep.Warnings)
				case v.warning != "" && (len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], v.warning)):
					t.Errorf("warnings %q, want one containing %q", rep.Warnings, v.warning)
				}
			}
			for _, m := range v.msg {
				if !strings.Contains(text, m) {
					t.Errorf("%q does not contain %q", text, m)
				}
			}
		})
	}
}

func TestInteropSION(t *testing.T) {
	checkSamples(t, "sion", []sampleVerdict{
		{file: "bad_magic.sion", kind: SION, code: "E_BAD_MAGIC", offset: 0, msg: []string{`"SIOX"`}},
		{file: "bad_meta2_offset.sion", kind: SION, code: "E_META2_OUT_OF_BOUNDS", offset: 1144, msg: []string{"start_of_varheader 1114244 outside file of 1048708 bytes"}},
		{file: "multiblk_4t_serial.sion", kind: SION, msg: []string{"sion v5 little-endian, 4 tasks, 3 blocks"}, ranges: []Range{
			{Off: 0, Len: 1152}, {Off: 65536, Len: 131172 - 65536}, {Off: 262144, Len: 40000}, {Off: 393216, Len: 65536}, {Off: 589824, Len: 40000}, {Off: 720896, Len: 1000}, {Off: 917504, Len: 40000}, {Off: 1048576, Len: 132},
		}},
		{file: "multifile_6t_2f.sion", kind: SION, msg: []string{"3 tasks, 2 blocks", "file 0 of 2"}, ranges: []Range{
			{Off: 0, Len: 1136}, {Off: 4096, Len: 3000}, {Off: 8192, Len: 12000}, {Off: 20480, Len: 100}, {Off: 28672, Len: 4000}, {Off: 45056, Len: 124},
		}, companions: []string{"multifile_6t_2f.sion.000001"}},
		{file: "multifile_6t_2f.sion.000001", kind: SION, msg: []string{"file 1 of 2"}, ranges: []Range{
			{Off: 0, Len: 1136}, {Off: 8192, Len: 5000}, {Off: 16384, Len: 1}, {Off: 24576, Len: 5000}, {Off: 36864, Len: 72},
		}, companions: []string{"multifile_6t_2f.sion"}},
		{file: "single_4t_1blk.sion", kind: SION, msg: []string{"4 tasks, 1 block"}, ranges: []Range{
			{Off: 0, Len: 1152}, {Off: 4096, Len: 500}, {Off: 8192, Len: 4000}, {Off: 20480, Len: 28736 - 20480},
		}},
		{file: "sparse_4t_bigchunk.sion", kind: SION, ranges: []Range{
			{Off: 0, Len: 1152}, {Off: 65536, Len: 4096}, {Off: 1114112, Len: 4096}, {Off: 2162688, Len: 4096}, {Off: 3211264, Len: 4096}, {Off: 4259840, Len: 64},
		}},
		{file: "README.md", kind: Plain},
	})
}

func TestInteropSIONDataBytes(t *testing.T) {
	// The README totals, and its promise that every byte outside the ranges
	// of a valid sample is zero: nothing the copy skips holds data.
	dir := shareddata.Dir(t, "sion")
	for name, total := range map[string]int64{
		"multiblk_4t_serial.sion": 253456, "multifile_6t_2f.sion": 20360, "multifile_6t_2f.sion.000001": 11209,
		"single_4t_1blk.sion": 13908, "sparse_4t_bigchunk.sion": 17600,
	} {
		path := filepath.Join(dir, name)
		rep, err := Inspect(context.Background(), path)
		wantValid(t, rep, err, SION)
		if rep.DataBytes != total {
			t.Errorf("%s: %d data bytes, want %d", name, rep.DataBytes, total)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Ranges {
			clear(b[r.Off:r.End()])
		}
		if i := slices.IndexFunc(b, func(c byte) bool { return c != 0 }); i >= 0 {
			t.Errorf("%s: non-zero byte at %d outside the ranges", name, i)
		}
	}
}

func TestInteropSIONMemberAlone(t *testing.T) {
	// File 0 of the set copied without its companion: sound, with the
	// companion listed and reported missing.
	src := filepath.Join(shareddata.Dir(t, "sion"), "multifile_6t_2f.sion")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := inspectBytes(t, "multifile_6t_2f.sion", b)
	wantValid(t, rep, err, SION)
	if len(rep.Companions) != 1 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "missing") {
		t.Fatalf("companions %q warnings %q", rep.Companions, rep.Warnings)
	}
}

func TestInteropFTIFF(t *testing.T) {
	checkSamples(t, "ftiff", []sampleVerdict{
		{file: "Ckpt1-Rank0.fti", kind: FTIFF, msg: []string{"ckpt 1, 1 block, 3 chunks (0 empty)"}},
		{file: "Ckpt4-Rank1.fti", kind: FTIFF, msg: []string{"ckpt 4, 4 blocks, 7 chunks (0 empty)"}},
		{file: "Ckpt5-Rank0.fti", kind: FTIFF, msg: []string{"ckpt 5, 4 blocks, 7 chunks (0 empty)"}},
		{file: "Ckpt6-Rank0.fti", kind: FTIFF, msg: []string{"ckpt 6, 5 blocks, 9 chunks (0 empty)"}},
		// Sound under the writer rule; FTI 1.6's own restart check rejects it.
		{file: "Ckpt7-Rank1.fti", kind: FTIFF, msg: []string{"ckpt 7, 5 blocks, 9 chunks (4 empty)"},
			warning: "FTI computes ff08b60e9667ba03867bd9c659a9b89e, the file says 1675d26711ed77fc129e3b739bcc6282"},
		{file: "Ckpt4-Rank1.data-flip.fti", kind: FTIFF, code: "E_CHUNK_HASH", offset: 240000, msg: []string{"variable id 4, container 0", "160000 bytes at offset 240000"}},
		{file: "Ckpt5-Rank0.meta-flip.fti", kind: FTIFF, code: "E_META_HASH", offset: -1},
		// Cut inside the data area: the chunk table and the file meta are
		// gone and nothing in the content marks it as FTI-FF, but its name
		// claims it is one, and the claim fails.
		{file: "Ckpt6-Rank0.truncated.fti", kind: FTIFF, code: "E_META_HASH", offset: 1000000 - ftiMetaSize,
			msg: []string{"named as an FTI checkpoint"}},
		{file: "README.md", kind: Plain},
	})
}

func TestInteropLIME(t *testing.T) {
	vols := []string{"su3_4x4x4x8_part.lime.vol0000", "su3_4x4x4x8_part.lime.vol0001", "su3_4x4x4x8_part.lime.vol0002", "su3_4x4x4x8_part.lime.vol0003"}
	others := func(i int) []string { return slices.Delete(slices.Clone(vols), i, i+1) }
	checkSamples(t, "lime", []sampleVerdict{
		{file: "su3_4x4x4x8_f.lime", kind: LIME, msg: []string{"10 records in 3 messages, scidac 2 binary records on 4x4x4x8 lattice, checksums ok"}},
		{file: "su3_4x4x4x8_ildg.lime", kind: LIME, msg: []string{"8 records in 2 messages, scidac 1 binary record on", "checksums ok"}},
		{file: vols[0], kind: LIME, companions: others(0), msg: []string{"partition master of a complete set of 4 volumes", "checksums ok"}},
		{file: vols[1], kind: LIME, companions: others(1), msg: []string{"128 of 512 sites, set of 4 volumes complete"}},
		{file: vols[2], kind: LIME, companions: others(2)},
		{file: vols[3], kind: LIME, companions: others(3)},
		{file: "damaged_bitflip_su3_4x4x4x8_f.lime", kind: LIME, code: "E_CHECKSUM", offset: 1336,
			msg: []string{"computed suma e41c90f0 sumb 11eed55, stored e74a76ab 2480b0e"}},
		{file: "damaged_truncated_su3_4x4x4x8_f.lime", kind: LIME, code: "E_TRUNCATED_PAYLOAD", offset: 1336,
			msg: []string{"at 1336 declares 147456 payload bytes, only 100000 present"}},
		{file: "lime_contents.txt", kind: Plain},
	})
}

func TestInteropLIMEVolumeMissing(t *testing.T) {
	dir := shareddata.Dir(t, "lime")
	files := map[string][]byte{}
	for _, n := range []string{"0000", "0001", "0003"} {
		b, err := os.ReadFile(filepath.Join(dir, "su3_4x4x4x8_part.lime.vol"+n))
		if err != nil {
			t.Fatal(err)
		}
		files["p.vol"+n] = b
	}
	tmp := writeFiles(t, t.TempDir(), files)
	for name := range files {
		rep, err := Inspect(context.Background(), filepath.Join(tmp, name))
		fe := wantCode(t, rep, err, LIME, "E_INCOMPLETE_SET")
		if !strings.Contains(fe.Msg, "cover 384 of the 512 lattice sites") {
			t.Errorf("%s: %v", name, fe)
		}
	}
}
