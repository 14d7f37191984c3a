package cache

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sionBase is a single-file container with several blocks, a partly filled
// chunk, unused chunks and a task that wrote nothing.
func sionBase(o binary.ByteOrder) sionSpec {
	return sionSpec{Order: o, Format: 5, FSBlock: 4096, NFiles: 1, Tasks: []sionTask{
		{Rank: 0, Chunk: 4096, Blocks: []int64{4096, 4096, 10}},
		{Rank: 1, Chunk: 6000, Blocks: []int64{5000}},
		{Rank: 2, Chunk: 100, Blocks: []int64{0}},
		{Rank: 3, Chunk: 8192, Blocks: []int64{8000, 8192}},
	}}
}

func TestSIONGenerated(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	serial := sionBase(le)
	serial.FileNumber, serial.Serial = 1, true
	v4 := sionBase(be)
	v4.Format = 4
	v3 := sionBase(le)
	v3.Format = 3
	userBig := sionBase(le)
	userBig.UserBig = true
	bigBlock := sionBase(be)
	bigBlock.FSBlock = 65536
	oneTask := sionSpec{Order: be, Format: 5, FSBlock: 512, NFiles: 1, Tasks: []sionTask{{Rank: 7, Chunk: 0, Blocks: nil}}}
	keyval := sionBase(le)
	keyval.KeyVal = 51
	tests := []struct {
		name   string
		spec   sionSpec
		detail string
	}{
		{"little-endian", sionBase(le), "sion v5 little-endian, 4 tasks, 3 blocks, 29394 bytes in chunks"},
		{"big-endian", sionBase(be), "sion v5 big-endian, 4 tasks, 3 blocks, 29394 bytes in chunks"},
		{"user data marked big", userBig, "little-endian, 4 tasks, 3 blocks, 29394 bytes in chunks, user data big-endian"},
		{"serial API", serial, "little-endian"},
		{"format 4", v4, "sion v4 big-endian"},
		{"format 3 unrounded chunk sizes", v3, "sion v3 little-endian"},
		{"64 KiB blocks", bigBlock, "big-endian"},
		{"one empty task", oneTask, "sion v5 big-endian, 1 task, 1 block, 0 bytes in chunks"},
		{"keyval inline", keyval, "keyval inline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, want, _ := encodeSION(tc.spec)
			rep, err := inspectBytes(t, "ckpt.dat", b)
			wantValid(t, rep, err, SION)
			if !slices.Equal(rep.Ranges, want) {
				t.Fatalf("ranges\n got %v\nwant %v", rep.Ranges, want)
			}
			if !strings.Contains(rep.Detail, tc.detail) {
				t.Errorf("detail %q, want %q", rep.Detail, tc.detail)
			}
			if len(rep.Warnings) != 0 || len(rep.Companions) != 0 {
				t.Errorf("warnings %q, companions %q", rep.Warnings, rep.Companions)
			}
		})
	}
}

func TestSIONStaleTail(t *testing.T) {
	sp := sionBase(binary.LittleEndian)
	sp.Tail = []byte("left over from a larger file")
	b, want, _ := encodeSION(sp)
	rep, err := inspectBytes(t, "x", b)
	wantValid(t, rep, err, SION)
	if !slices.Equal(rep.Ranges, want) {
		t.Fatalf("ranges %v, want %v", rep.Ranges, want)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "28 bytes after the end of META2") {
		t.Fatalf("warnings %q", rep.Warnings)
	}
}

func TestSIONMultiFile(t *testing.T) {
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		t.Run(o.String(), func(t *testing.T) {
			specs := sionMultiSpec(o)
			files := map[string][]byte{}
			wants := map[string][]Range{}
			for k, sp := range specs {
				b, want, _ := encodeSION(sp)
				name := sionMemberName("set.sion", int64(k))
				files[name], wants[name] = b, want
			}
			dir := writeFiles(t, t.TempDir(), files)
			all := []string{filepath.Join(dir, "set.sion"), filepath.Join(dir, "set.sion.000001"), filepath.Join(dir, "set.sion.000002")}
			for k, path := range all {
				rep, err := Inspect(context.Background(), path)
				wantValid(t, rep, err, SION)
				if want := wants[filepath.Base(path)]; !slices.Equal(rep.Ranges, want) {
					t.Errorf("%s: ranges %v, want %v", path, rep.Ranges, want)
				}
				others := slices.Delete(slices.Clone(all), k, k+1)
				if !slices.Equal(rep.Companions, others) {
					t.Errorf("%s: companions %q, want %q", path, rep.Companions, others)
				}
				if len(rep.Warnings) != 0 {
					t.Errorf("%s: warnings %q", path, rep.Warnings)
				}
			}
		})
	}
}

// sionSet writes the three-file set, lets edit change the encoded files and
// returns the directory.
func sionSet(t *testing.T, edit func(files map[string][]byte)) string {
	t.Helper()
	files := map[string][]byte{}
	for k, sp := range sionMultiSpec(binary.LittleEndian) {
		b, _, _ := encodeSION(sp)
		files[sionMemberName("set.sion", int64(k))] = b
	}
	edit(files)
	return writeFiles(t, t.TempDir(), files)
}

func TestSIONSetProblems(t *testing.T) {
	specs := sionMultiSpec(binary.LittleEndian)
	mapOff := func(g int) int64 {
		_, _, l := encodeSION(specs[0])
		return l.Meta2End + 4 + 8*int64(g)
	}
	tests := []struct {
		name    string
		edit    func(map[string][]byte)
		inspect string
		code    string // "" for valid
		warn    string
	}{
		{"member missing", func(f map[string][]byte) { delete(f, "set.sion.000002") }, "set.sion", "", "1 of the 3 files of the set are missing"},
		{"file 0 missing", func(f map[string][]byte) { delete(f, "set.sion") }, "set.sion.000001", "", "missing"},
		{"member renamed", func(f map[string][]byte) {
			f["set.sion.1"] = f["set.sion.000001"]
			delete(f, "set.sion.000001")
		}, "set.sion.1", "", "cannot locate the other 2 files"},
		{"member disagrees on nfiles", func(f map[string][]byte) {
			binary.LittleEndian.PutUint32(f["set.sion.000001"][28:], 4)
		}, "set.sion", "E_BAD_NFILES", ""},
		{"member has the wrong filenumber", func(f map[string][]byte) {
			binary.LittleEndian.PutUint32(f["set.sion.000002"][32:], 1)
		}, "set.sion.000001", "E_BAD_FILENUMBER", ""},
		{"mapping swaps two tasks of file 1", func(f map[string][]byte) {
			b := f["set.sion"]
			binary.LittleEndian.PutUint32(b[mapOff(2)+4:], 1)
			binary.LittleEndian.PutUint32(b[mapOff(3)+4:], 0)
		}, "set.sion.000002", "E_BAD_MAPPING", ""},
		{"mapping sends a rank to a task file 2 lacks", func(f map[string][]byte) {
			binary.LittleEndian.PutUint32(f["set.sion"][mapOff(6)+4:], 3)
		}, "set.sion", "E_BAD_MAPPING", ""},
		{"mapping leaves a task of file 2 out", func(f map[string][]byte) {
			sp := specs[2]
			sp.Tasks = append(slices.Clone(sp.Tasks), sionTask{Rank: 7, Chunk: 10, Blocks: []int64{10}})
			f["set.sion.000002"], _, _ = encodeSION(sp)
		}, "set.sion.000002", "E_BAD_MAPPING", ""},
		{"corrupt member", func(f map[string][]byte) {
			b := f["set.sion.000002"]
			_, _, l := encodeSION(specs[2])
			binary.LittleEndian.PutUint64(b[l.SOV+8*3:], 1<<20) // task 0, block 0
		}, "set.sion", "E_CHUNK_OVERFLOW", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := sionSet(t, tc.edit)
			rep, err := Inspect(context.Background(), filepath.Join(dir, tc.inspect))
			if tc.code != "" {
				fe := wantCode(t, rep, err, SION, tc.code)
				t.Log(fe)
				return
			}
			wantValid(t, rep, err, SION)
			if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, tc.warn) }) {
				t.Fatalf("warnings %q, want one containing %q", rep.Warnings, tc.warn)
			}
		})
	}
}

func TestSIONCorrupt(t *testing.T) {
	sp := sionBase(binary.LittleEndian)
	base, _, l := encodeSION(sp)
	n := int64(len(sp.Tasks))
	put32 := func(off int64, v int32) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], uint32(v)); return b }
	}
	put64 := func(off, v int64) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], uint64(v)); return b }
	}
	blocksize := func(blk, task int64) int64 { return l.SOV + 8*n + 8*(blk*n+task) }
	tests := []struct {
		name  string
		patch func([]byte) []byte
		code  string
	}{
		{"bad magic, structure intact", func(b []byte) []byte { copy(b, "SIOX"); return b }, "E_BAD_MAGIC"},
		{"magic only", func([]byte) []byte { return []byte("sion") }, "E_TRUNCATED_HEADER"},
		{"cut inside the fixed header", func(b []byte) []byte { return b[:1000] }, "E_TRUNCATED_HEADER"},
		{"endianness word 02000002", func(b []byte) []byte { copy(b[4:], []byte{2, 0, 0, 2}); return b }, "E_BAD_ENDIANNESS"},
		{"endianness word 00000001", func(b []byte) []byte { copy(b[4:], []byte{0, 0, 0, 1}); return b }, "E_BAD_ENDIANNESS"},
		{"file format 2", put32(16, 2), "E_UNSUPPORTED_VERSION"},
		{"file format 6", put32(16, 6), "E_UNSUPPORTED_VERSION"},
		{"fsblksize 0", put32(20, 0), "E_BAD_FSBLKSIZE"},
		{"ntasks 0", put32(24, 0), "E_BAD_NTASKS"},
		{"ntasks 2^31-1", put32(24, math.MaxInt32), "E_TRUNCATED_HEADER"},
		{"nfiles 0", put32(28, 0), "E_BAD_NFILES"},
		{"nfiles 2^31-1", put32(28, math.MaxInt32), "E_BAD_NFILES"},
		{"filenumber 2 of 1", put32(32, 2), "E_BAD_FILENUMBER"},
		{"negative chunk size", put64(sp.FieldOff("chunksize", 1), -4096), "E_BAD_CHUNKSIZE"},
		{"chunk sizes overflow", func(b []byte) []byte {
			put64(sp.FieldOff("chunksize", 1), math.MaxInt64)(b)
			return put64(sp.FieldOff("chunksize", 2), math.MaxInt64)(b)
		}, "E_BAD_CHUNKSIZE"},
		{"chunk size near 2^63", put64(sp.FieldOff("chunksize", 3), math.MaxInt64-16384), "E_META2_OFFSET_MISMATCH"},
		{"maxchunks 0", put32(sp.FieldOff("maxchunks", 0), 0), "E_BAD_MAXCHUNKS"},
		{"maxchunks 2^31-1", put32(sp.FieldOff("maxchunks", 0), math.MaxInt32), "E_META2_OUT_OF_BOUNDS"},
		{"start_of_varheader 2^63-1", put64(sp.FieldOff("sov", 0), math.MaxInt64), "E_META2_OUT_OF_BOUNDS"},
		{"start_of_varheader negative", put64(sp.FieldOff("sov", 0), -8), "E_META2_OUT_OF_BOUNDS"},
		{"start_of_varheader off by 8", put64(sp.FieldOff("sov", 0), l.SOV-8), "E_META2_OFFSET_MISMATCH"},
		{"META2 cut off", func(b []byte) []byte { return b[:l.Meta2End-1] }, "E_META2_OUT_OF_BOUNDS"},
		{"blockcount above maxchunks", put64(l.SOV+8, 4), "E_BAD_BLOCKCOUNT"},
		{"blockcount 2^63-1", put64(l.SOV+8, math.MaxInt64), "E_BAD_BLOCKCOUNT"},
		{"no task uses maxchunks blocks", put64(l.SOV, 2), "E_BAD_BLOCKCOUNT"},
		{"data beyond blockcount", put64(blocksize(2, 1), 1), "E_BAD_BLOCKCOUNT"},
		{"unused chunk stored as -1", put64(blocksize(1, 1), -1), "E_BAD_BLOCKCOUNT"},
		{"bytes written exceed the chunk", put64(blocksize(0, 1), 8193), "E_CHUNK_OVERFLOW"},
		{"bytes written negative", put64(blocksize(0, 1), -1), "E_CHUNK_OVERFLOW"},
		{"bytes written 2^63-1", put64(blocksize(1, 0), math.MaxInt64), "E_CHUNK_OVERFLOW"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.patch(slices.Clone(base))
			rep, err := inspectBytes(t, "c.sion", b)
			fe := wantCode(t, rep, err, SION, tc.code)
			if !strings.HasPrefix(fe.Error(), fe.Path+": sion: ") || !strings.HasSuffix(fe.Error(), "("+tc.code+")") {
				t.Fatalf("error text %q", fe.Error())
			}
		})
	}
}

func TestSIONMappingCorrupt(t *testing.T) {
	specs := sionMultiSpec(binary.BigEndian)
	base, _, l := encodeSION(specs[0])
	tests := []struct {
		name  string
		patch func([]byte) []byte
	}{
		{"no mapping", func(b []byte) []byte { return b[:l.Meta2End] }},
		{"mapping_size 2^31-1", func(b []byte) []byte { binary.BigEndian.PutUint32(b[l.Meta2End:], math.MaxInt32); return b }},
		{"mapping_size negative", func(b []byte) []byte { binary.BigEndian.PutUint32(b[l.Meta2End:], 0xffffffff); return b }},
		{"mapping_size below ntasks", func(b []byte) []byte { binary.BigEndian.PutUint32(b[l.Meta2End:], 1); return b }},
		{"file number out of range", func(b []byte) []byte { binary.BigEndian.PutUint32(b[l.Meta2End+4+8*5:], 3); return b }},
		{"rank of file 0 misplaced", func(b []byte) []byte { binary.BigEndian.PutUint32(b[l.Meta2End+4+4:], 1); return b }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := inspectBytes(t, "m.sion", tc.patch(slices.Clone(base)))
			wantCode(t, rep, err, SION, "E_BAD_MAPPING")
		})
	}
}
