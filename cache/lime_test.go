package cache

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hyperRanksOf lists the lattice ranks of the box lo..hi in lexicographic
// order, first coordinate fastest.
func hyperRanksOf(dims, lo, hi []int) []uint64 {
	var out []uint64
	x := slices.Clone(lo)
	for {
		r, st := 0, 1
		for k := range dims {
			r += x[k] * st
			st *= dims[k]
		}
		out = append(out, uint64(r))
		k := 0
		for ; k < len(x); k++ {
			if x[k] < hi[k] {
				x[k]++
				break
			}
			x[k] = lo[k]
		}
		if k == len(x) {
			return out
		}
	}
}

func TestLIMEGenerated(t *testing.T) {
	dims, field := limeField(1)
	lo, hi := []int{1, 0, 0, 1}, []int{2, 3, 1, 1}
	cube := hyperRanksOf(dims, lo, hi)
	hyper := scidacField{typesize: 5, datacount: 3, kind: recordHypercube, lo: lo, hi: hi, data: pattern(15*len(cube), 9), ranks: cube}
	odd := scidacField{typesize: 5, datacount: 3, kind: recordGlobal, data: pattern(15, 3), ranks: seqRanks(1)}
	bigDims := []int{8, 8, 8, 8}
	big := scidacField{typesize: 72, datacount: 4, kind: recordField, data: pattern(4096*288, 7), ranks: seqRanks(4096)}
	tests := []struct {
		name    string
		file    []byte
		records int
	}{
		{"field and global", scidacSingle(dims, field, limeGlobal()), 2},
		{"unpadded and padded payloads", scidacSingle(dims, odd, field), 2},
		{"hypercube", scidacSingle(dims, hyper, field), 2},
		{"datums across read buffers", scidacSingle(bigDims, big), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := inspectBytes(t, "cfg", tc.file)
			wantValid(t, rep, err, LIME)
			if want := "scidac " + count(int64(tc.records), "binary record"); !strings.Contains(rep.Detail, want) || !strings.Contains(rep.Detail, "checksums ok") {
				t.Errorf("detail %q, want %q", rep.Detail, want)
			}
			if !slices.Equal(rep.Ranges, []Range{{Off: 0, Len: int64(len(tc.file))}}) {
				t.Errorf("ranges %v", rep.Ranges)
			}
		})
	}
}

func TestLIMEWithoutSciDAC(t *testing.T) {
	plain := limeEncode(append(message(limeRec{Type: "lime-note", Data: []byte("x")}),
		message(limeRec{Type: "a", Data: make([]byte, 16)}, limeRec{Type: "b"}, limeRec{Type: "c", Data: []byte("1234567")})...))
	rep, err := inspectBytes(t, "f", plain)
	wantValid(t, rep, err, LIME)
	if !strings.Contains(rep.Detail, "4 records in 2 messages") || len(rep.Warnings) != 0 {
		t.Fatalf("detail %q warnings %q", rep.Detail, rep.Warnings)
	}
	alien := limeEncode(message(xmlRec(typeILDGFormat, "<ildgFormat/>"), limeRec{Type: typeILDGBinary, Data: make([]byte, 64)}))
	rep, err = inspectBytes(t, "f", alien)
	wantValid(t, rep, err, LIME)
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no checksum") {
		t.Fatalf("warnings %q", rep.Warnings)
	}
}

// limeHeaderOffsets returns the header offsets of a well-formed LIME file.
func limeHeaderOffsets(b []byte) []int64 {
	var offs []int64
	for off := int64(0); off < int64(len(b)); {
		offs = append(offs, off)
		n := int64(binary.BigEndian.Uint64(b[off+8:]))
		off += limeHeaderSize + n + (8-n%8)%8
	}
	return offs
}

func TestLIMECorrupt(t *testing.T) {
	dims, field := limeField(2)
	base := scidacSingle(dims, field, limeGlobal())
	offs := limeHeaderOffsets(base)
	// Records: 0 private-file-xml, 1 file-xml | 2 private-record-xml,
	// 3 record-xml, 4 binary, 5 checksum | 6..9 the global record.
	binOff := offs[4] + limeHeaderSize
	setLen := func(rec int, n uint64) func([]byte) []byte {
		return func(b []byte) []byte { binary.BigEndian.PutUint64(b[offs[rec]+8:], n); return b }
	}
	flags := func(rec int, f byte) func([]byte) []byte {
		return func(b []byte) []byte { b[offs[rec]+6] = f; return b }
	}
	rebuild := func(edit func([]limeRec) []limeRec) func([]byte) []byte {
		return func([]byte) []byte {
			recs := message(
				xmlRec(typePrivateFileXML, "<scidacFile><version>1.1</version><spacetime>4</spacetime><dims>4 4 2 2 </dims><volfmt>0</volfmt></scidacFile>"),
				xmlRec(typeFileXML, "<info/>"),
			)
			recs = append(recs, field.messages(typeScidacBinary, true)...)
			return limeEncode(edit(recs))
		}
	}
	replaceXML := func(rec int, typ, body string) func([]byte) []byte {
		return rebuild(func(r []limeRec) []limeRec {
			x := xmlRec(typ, body)
			x.MB, x.ME = r[rec].MB, r[rec].ME
			r[rec] = x
			return r
		})
	}
	tests := []struct {
		name  string
		patch func([]byte) []byte
		code  string
		want  string
	}{
		{"bad magic in the first record", func(b []byte) []byte { b[0] = 0x46; return b }, "E_BAD_MAGIC", "record 0"},
		{"bad magic in a later record", func(b []byte) []byte { b[offs[5]+3] = 0; return b }, "E_BAD_MAGIC", "record 5"},
		{"version 2", func(b []byte) []byte { b[offs[2]+5] = 2; return b }, "E_BAD_VERSION", ""},
		{"reserved flag bit", flags(3, 0x01), "E_BAD_FLAGS", ""},
		{"reserved byte", func(b []byte) []byte { b[offs[3]+7] = 1; return b }, "E_BAD_FLAGS", ""},
		{"type without NUL", func(b []byte) []byte {
			copy(b[offs[1]+16:offs[1]+limeHeaderSize], strings.Repeat("t", 128))
			return b
		}, "E_BAD_TYPE", ""},
		{"data_length 2^64-1", setLen(4, math.MaxUint64), "E_TRUNCATED_PAYLOAD", ""},
		{"data_length 2^63", setLen(4, 1<<63), "E_TRUNCATED_PAYLOAD", ""},
		{"data_length one too large", setLen(9, 137), "E_TRUNCATED_PAYLOAD", ""},
		{"data_length into the next header", setLen(4, 64*24+64), "E_BAD_MAGIC", ""},
		{"cut inside a header", func(b []byte) []byte { return b[:offs[6]+100] }, "E_TRUNCATED_HEADER", "100 of the 144"},
		{"cut inside a payload", func(b []byte) []byte { return b[:binOff+1000] }, "E_TRUNCATED_PAYLOAD", fmt.Sprintf("at %d declares 1536 payload bytes, only 1000 present", offs[4])},
		{"cut inside padding", func([]byte) []byte {
			return limeEncode(message(limeRec{Type: "a", Data: []byte("12345")}))[:limeHeaderSize+7]
		}, "E_MISSING_PADDING", ""},
		{"non-zero padding", func(b []byte) []byte { b[offs[1]-1] = 1; return b }, "E_BAD_PADDING", ""},
		{"first record without MB", flags(0, 0), "E_MESSAGE", ""},
		{"MB inside an open message", flags(3, limeFlagMB), "E_MESSAGE", ""},
		{"record after ME without MB", flags(2, 0), "E_MESSAGE", ""},
		{"last record without ME", flags(9, 0), "E_MESSAGE", "file ends inside message"},
		{"payload bit flip", func(b []byte) []byte { b[binOff+700] ^= 0x10; return b }, "E_CHECKSUM", "computed suma"},
		{"global payload flip", func(b []byte) []byte { b[offs[8]+limeHeaderSize] ^= 1; return b }, "E_CHECKSUM", ""},
		{"checksum without digits", replaceXML(5, typeChecksum, "<scidacChecksum><suma>zz</suma><sumb>1</sumb></scidacChecksum>"), "E_SCIDAC", "not a 32-bit hex"},
		{"checksum record missing", rebuild(func(r []limeRec) []limeRec { r[4].ME = true; return r[:5] }), "E_SCIDAC", "found 1, 1 and 0"},
		{"binary before its record XML", rebuild(func(r []limeRec) []limeRec {
			r[2], r[4] = r[4], r[2]
			r[2].MB, r[4].MB = true, false
			return r
		}), "E_SCIDAC", "in that order"},
		{"no dims", replaceXML(0, typePrivateFileXML, "<scidacFile><volfmt>0</volfmt></scidacFile>"), "E_SCIDAC", "no <dims>"},
		{"dims overflow", replaceXML(0, typePrivateFileXML, "<dims>4294967296 4294967296 4294967296</dims>"), "E_SCIDAC", "too large"},
		{"dims zero", replaceXML(0, typePrivateFileXML, "<dims>4 0 2 2</dims>"), "E_SCIDAC", "bad lattice extent"},
		{"spacetime disagrees", replaceXML(0, typePrivateFileXML, "<spacetime>3</spacetime><dims>4 4 2 2</dims>"), "E_SCIDAC", "spacetime"},
		{"volfmt 7", replaceXML(0, typePrivateFileXML, "<dims>4 4 2 2</dims><volfmt>7</volfmt>"), "E_SCIDAC", "volume format"},
		{"partition master without site list", replaceXML(0, typePrivateFileXML, "<dims>4 4 2 2</dims><volfmt>2</volfmt>"), "E_SCIDAC", "site list present: false"},
		{"huge lattice", replaceXML(0, typePrivateFileXML, "<dims>1000000 1000000 1000000 1</dims>"), "E_LENGTH", ""},
		{"typesize 2^62", replaceXML(2, typePrivateRecordXML, "<recordtype>0</recordtype><typesize>4611686018427387904</typesize><datacount>4</datacount>"), "E_SCIDAC", "<datacount>"},
		{"typesize 2^62, datacount 1", replaceXML(2, typePrivateRecordXML, "<recordtype>0</recordtype><typesize>4611686018427387904</typesize><datacount>1</datacount>"), "E_LENGTH", ""},
		{"datum wrong", replaceXML(2, typePrivateRecordXML, "<recordtype>0</recordtype><typesize>12</typesize><datacount>3</datacount>"), "E_LENGTH", "want 64 sites of 36 bytes"},
		{"no recordtype", replaceXML(2, typePrivateRecordXML, "<typesize>12</typesize><datacount>2</datacount>"), "E_SCIDAC", "no <recordtype>"},
		{"hypercube outside the lattice", replaceXML(2, typePrivateRecordXML, "<recordtype>2</recordtype><typesize>12</typesize><datacount>2</datacount><hyperlower>0 0 0 0</hyperlower><hyperupper>4 0 0 0</hyperupper>"), "E_SCIDAC", "outside the lattice"},
		{"XML record too large", rebuild(func(r []limeRec) []limeRec { r[2].Data = make([]byte, maxXMLBytes+1); return r }), "E_SCIDAC", "larger than"},
		{"stray scidac record", func([]byte) []byte {
			return limeEncode(message(limeRec{Type: typeScidacBinary, Data: []byte("x")}, limeRec{Type: "other"}))
		}, "E_SCIDAC", "no scidac-private-file-xml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := inspectBytes(t, "f.lime", tc.patch(slices.Clone(base)))
			fe := wantCode(t, rep, err, LIME, tc.code)
			if !strings.Contains(fe.Msg, tc.want) {
				t.Fatalf("message %q does not contain %q", fe.Msg, tc.want)
			}
		})
	}
}

// partitionFiles builds a three-volume set numbered 0, 2 and 5 (volume
// numbers are I/O node numbers) whose site lists interleave.
func partitionFiles(seed byte) (map[int][]byte, []int) {
	dims, field := limeField(seed)
	vols := scidacPartition(dims, field, limeGlobal(), 3, func(r int) int { return r % 3 })
	numbers := []int{0, 2, 5}
	out := map[int][]byte{}
	for i, n := range numbers {
		out[n] = vols[i]
	}
	return out, numbers
}

func writePartition(t *testing.T, vols map[int][]byte, name func(n int) string) string {
	t.Helper()
	files := map[string][]byte{}
	for n, b := range vols {
		files[name(n)] = b
	}
	return writeFiles(t, t.TempDir(), files)
}

func volName(n int) string { return fmt.Sprintf("cfg.lime.vol%04d", n) }

func TestLIMEPartition(t *testing.T) {
	vols, numbers := partitionFiles(4)
	dir := writePartition(t, vols, volName)
	var all []string
	for _, n := range numbers {
		all = append(all, filepath.Join(dir, volName(n)))
	}
	for i, path := range all {
		rep, err := Inspect(context.Background(), path)
		wantValid(t, rep, err, LIME)
		if others := slices.Delete(slices.Clone(all), i, i+1); !slices.Equal(rep.Companions, others) {
			t.Errorf("%s: companions %q, want %q", path, rep.Companions, others)
		}
		want := "checksums are verified with the master"
		if i == 0 {
			want = "partition master of a complete set of 3 volumes"
		}
		if !strings.Contains(rep.Detail, want) {
			t.Errorf("%s: detail %q, want %q", path, rep.Detail, want)
		}
	}
}

func TestLIMEPartitionDir(t *testing.T) {
	vols, numbers := partitionFiles(5)
	// PARTFILE_DIR: DIR/volNNNN/NAME, volfmt 3.
	vols[0] = []byte(strings.Replace(string(vols[0]), "<volfmt>2</volfmt>", "<volfmt>3</volfmt>", 1))
	dir := writePartition(t, vols, func(n int) string { return filepath.Join(fmt.Sprintf("vol%04d", n), "cfg.lime") })
	rep, err := Inspect(context.Background(), filepath.Join(dir, "vol0000", "cfg.lime"))
	wantValid(t, rep, err, LIME)
	if len(rep.Companions) != len(numbers)-1 || !strings.Contains(rep.Detail, "checksums ok") {
		t.Fatalf("companions %q detail %q", rep.Companions, rep.Detail)
	}
}

func TestLIMEPartitionProblems(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(vols map[int][]byte)
		inspect int
		code    string // "" for valid
		want    string
	}{
		{"volume missing, seen from the master", func(v map[int][]byte) { delete(v, 5) }, 0, "E_INCOMPLETE_SET", "cover 43 of the 64 lattice sites"},
		{"volume missing, seen from a volume", func(v map[int][]byte) { delete(v, 5) }, 2, "E_INCOMPLETE_SET", ""},
		{"master missing", func(v map[int][]byte) { delete(v, 0) }, 5, "E_INCOMPLETE_SET", "no master volume"},
		{"data flipped in a volume, seen from the master", func(v map[int][]byte) { v[2][len(v[2])-100] ^= 4 }, 0, "E_CHECKSUM", ""},
		{"data flipped in a volume, seen from that volume", func(v map[int][]byte) { v[2][len(v[2])-100] ^= 4 }, 2, "", ""},
		{"site stored twice", func(v map[int][]byte) {
			// Volume 5 holds ranks 2, 5, ...: make its first entry 5.
			binary.BigEndian.PutUint32(v[5][limeHeaderSize:], 5)
		}, 0, "E_SITELIST", "site 5 is stored twice"},
		{"site outside the lattice", func(v map[int][]byte) { binary.BigEndian.PutUint32(v[2][limeHeaderSize:], 64) }, 5, "E_SITELIST", "outside the lattice"},
		{"volume framing broken", func(v map[int][]byte) { v[5] = v[5][:len(v[5])-8] }, 0, "E_TRUNCATED_PAYLOAD", "partition volume"},
		{"volume lacks its binary record", func(v map[int][]byte) {
			n := int(binary.BigEndian.Uint64(v[2][8:]))
			v[2] = v[2][:limeHeaderSize+n+(8-n%8)%8]
		}, 0, "E_SCIDAC", "holds 0 binary records"},
		{"volume binary one site short", func(v map[int][]byte) {
			// 21 sites of 24 bytes in the list, 20 in the data.
			sl := v[2][limeHeaderSize : limeHeaderSize+84]
			data := v[2][376 : 376+20*24]
			v[2] = limeEncode(append(message(limeRec{Type: typeSitelist, Data: sl}), message(limeRec{Type: typeScidacBinary, Data: data})...))
		}, 0, "E_LENGTH", ""},
		{"not a volume beside the set", func(v map[int][]byte) { v[9] = limeEncode(message(limeRec{Type: "x"})) }, 0, "E_SCIDAC", "not a partition volume"},
		{"two masters", func(v map[int][]byte) { v[9] = v[0] }, 2, "E_SCIDAC", "two master volumes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vols, _ := partitionFiles(4)
			tc.edit(vols)
			dir := writePartition(t, vols, volName)
			rep, err := Inspect(context.Background(), filepath.Join(dir, volName(tc.inspect)))
			if tc.code == "" {
				wantValid(t, rep, err, LIME)
				return
			}
			fe := wantCode(t, rep, err, LIME, tc.code)
			if !strings.Contains(fe.Msg, tc.want) {
				t.Fatalf("message %q does not contain %q", fe.Msg, tc.want)
			}
		})
	}
}

func TestLIMEPartitionSingleVolumeMaster(t *testing.T) {
	// A partition master whose site list covers the whole lattice is a
	// complete set on its own, even when its name has no volume suffix.
	dims, field := limeField(6)
	vols := scidacPartition(dims, field, limeGlobal(), 1, func(int) int { return 0 })
	dir := t.TempDir()
	path := filepath.Join(dir, "whole.lime")
	if err := os.WriteFile(path, vols[0], 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := Inspect(context.Background(), path)
	wantValid(t, rep, err, LIME)
	if len(rep.Companions) != 0 {
		t.Fatalf("companions %q", rep.Companions)
	}
}
