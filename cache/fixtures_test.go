package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/cache/cachetest"
)

// memFS is an in-memory fileSystem keyed by absolute path.
type memFS map[string][]byte

type memFile struct {
	*bytes.Reader
	n int64
}

func (f memFile) size() int64  { return f.n }
func (f memFile) Close() error { return nil }

func (m memFS) open(path string) (file, error) {
	b, ok := m[path]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return memFile{bytes.NewReader(b), int64(len(b))}, nil
}

func (m memFS) readDir(dir string) ([]string, error) {
	var names []string
	for p := range m {
		if filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	slices.Sort(names)
	return names, nil
}

// writeFiles writes name → content into dir and returns dir.
func writeFiles(t testing.TB, dir string, files map[string][]byte) string {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// inspectBytes writes b to a temporary file and inspects it.
func inspectBytes(t testing.TB, name string, b []byte) (*Report, error) {
	t.Helper()
	dir := writeFiles(t, t.TempDir(), map[string][]byte{name: b})
	return Inspect(context.Background(), filepath.Join(dir, name))
}

// wantValid fails t unless err is nil and rep has the given kind.
func wantValid(t testing.TB, rep *Report, err error, kind Kind) {
	t.Helper()
	if err != nil {
		t.Fatalf("want a valid %s file, got %v", kind, err)
	}
	if rep.Kind != kind {
		t.Fatalf("kind %q, want %q (detail %q)", rep.Kind, kind, rep.Detail)
	}
	sum := int64(0)
	for i, r := range rep.Ranges {
		if r.Len <= 0 || r.Off < 0 || r.End() > rep.Size || i > 0 && r.Off <= rep.Ranges[i-1].End() {
			t.Fatalf("ranges not sorted, merged and inside the file: %v (size %d)", rep.Ranges, rep.Size)
		}
		sum += r.Len
	}
	if sum != rep.DataBytes {
		t.Fatalf("DataBytes %d, ranges sum to %d", rep.DataBytes, sum)
	}
}

// wantCode fails t unless err is a FormatError of the given kind and code.
func wantCode(t testing.TB, rep *Report, err error, kind Kind, code string) *FormatError {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("want %s %s, got report %+v, error %v", kind, code, rep, err)
	}
	if fe.Kind != kind || fe.Code != code {
		t.Fatalf("want %s %s, got %v", kind, code, fe)
	}
	if rep == nil || rep.Kind != kind || rep.Ranges != nil {
		t.Fatalf("partial report for a corrupt file: %+v", rep)
	}
	return fe
}

// The SIONlib encoder is cachetest's, shared with scr-ctl demo's samples.
type (
	sionSpec   = cachetest.SIONSpec
	sionTask   = cachetest.SIONTask
	sionPlaced = cachetest.SIONPlaced
)

// encodeSION encodes sp; its ranges are this package's Ranges.
func encodeSION(sp sionSpec) ([]byte, []Range, sionPlaced) { return sp.Encode() }

func sionMultiSpec(o binary.ByteOrder) []sionSpec { return cachetest.SIONMultiSpec(o) }

// ---- FTI-FF ----

// ftiSteps is a run in which variables are added, grow and shrink.
func ftiSteps() [][]cachetest.FTIVar {
	return [][]cachetest.FTIVar{
		{{ID: 1, Size: 1000}, {ID: 2, Size: 2000}},
		{{ID: 1, Size: 1000}, {ID: 2, Size: 2000}, {ID: 3, Size: 500}},
		{{ID: 1, Size: 1000}, {ID: 2, Size: 6000}, {ID: 3, Size: 700}},
		{{ID: 1, Size: 1000}, {ID: 2, Size: 3000}, {ID: 3, Size: 700}},
		{{ID: 1, Size: 1000}, {ID: 2, Size: 1500}, {ID: 3, Size: 100}},
		{{ID: 1, Size: 1200}, {ID: 2, Size: 9000}, {ID: 3, Size: 700}, {ID: 4, Size: 64}},
	}
}

// ftiRun returns the files of every step of ftiSteps.
func ftiRun(o binary.ByteOrder) [][]byte {
	w := &cachetest.FTIWriter{Order: o}
	var files [][]byte
	for i, vars := range ftiSteps() {
		files = append(files, w.Checkpoint(int32(i+1), vars))
	}
	return files
}

// ---- LIME / SciDAC ----

// The LIME encoder is cachetest's, shared with scr-ctl demo's samples.
type limeRec = cachetest.LIMERecord

func limeEncode(recs []limeRec) []byte  { return cachetest.LIMEEncode(recs) }
func message(recs ...limeRec) []limeRec { return cachetest.LIMEMessage(recs...) }
func xmlRec(typ, body string) limeRec   { return cachetest.XMLRecord(typ, body) }

func seqRanks(n int) []uint64 {
	r := make([]uint64, n)
	for i := range r {
		r[i] = uint64(i)
	}
	return r
}

// scidacField is one field record: datum = typesize*datacount bytes per site.
type scidacField struct {
	typesize, datacount int
	kind                int // recordField, recordGlobal or recordHypercube
	lo, hi              []int
	data                []byte
	ranks               []uint64
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed ^ byte(i>>8)
	}
	return b
}

func dimsText(dims []int) string {
	var s []string
	for _, d := range dims {
		s = append(s, fmt.Sprint(d))
	}
	return strings.Join(s, " ") + " "
}

func (f scidacField) messages(binType string, withSums bool) []limeRec {
	rt := fmt.Sprintf("<recordtype>%d</recordtype>", f.kind)
	if f.kind == recordHypercube {
		rt += "<hyperlower>" + dimsText(f.lo) + "</hyperlower><hyperupper>" + dimsText(f.hi) + "</hyperupper>"
	}
	recs := []limeRec{
		xmlRec(typePrivateRecordXML, fmt.Sprintf("<scidacRecord><version>1.1</version>%s<datatype>X</datatype><precision>F</precision><typesize>%d</typesize><datacount>%d</datacount></scidacRecord>", rt, f.typesize, f.datacount)),
		xmlRec(typeRecordXML, "<info>user</info>"),
		{Type: binType, Data: f.data},
	}
	if withSums {
		a, b := cachetest.SciDACChecksums(f.data, f.typesize*f.datacount, f.ranks)
		recs = append(recs, xmlRec(typeChecksum, fmt.Sprintf("<scidacChecksum><version>1.0</version><suma>%x</suma><sumb>%x</sumb></scidacChecksum>", a, b)))
	}
	return message(recs...)
}

// scidacSingle builds a single SciDAC file on dims with the given records.
func scidacSingle(dims []int, fields ...scidacField) []byte {
	recs := message(
		xmlRec(typePrivateFileXML, "<scidacFile><version>1.1</version><spacetime>"+fmt.Sprint(len(dims))+"</spacetime><dims>"+dimsText(dims)+"</dims><volfmt>0</volfmt></scidacFile>"),
		xmlRec(typeFileXML, "<info>generated</info>"),
	)
	for _, f := range fields {
		recs = append(recs, f.messages(typeScidacBinary, true)...)
	}
	return limeEncode(recs)
}

func volumeOf(dims []int) int {
	v := 1
	for _, d := range dims {
		v *= d
	}
	return v
}

// scidacPartition splits a field record and a global record of a single
// file over volumes by site rank (site r goes to volume owner(r)) and
// returns the volume files by number.
func scidacPartition(dims []int, field, global scidacField, nvol int, owner func(r int) int) map[int][]byte {
	datum := field.typesize * field.datacount
	sites := make([][]int, nvol)
	for r := 0; r < volumeOf(dims); r++ {
		sites[owner(r)] = append(sites[owner(r)], r)
	}
	out := map[int][]byte{}
	for v := 0; v < nvol; v++ {
		sl := make([]byte, 4*len(sites[v]))
		var data []byte
		for i, r := range sites[v] {
			binary.BigEndian.PutUint32(sl[4*i:], uint32(r))
			data = append(data, field.data[r*datum:(r+1)*datum]...)
		}
		slRec := limeRec{Type: typeSitelist, Data: sl}
		if v == 0 {
			recs := message(
				xmlRec(typePrivateFileXML, "<scidacFile><version>1.1</version><spacetime>"+fmt.Sprint(len(dims))+"</spacetime><dims>"+dimsText(dims)+"</dims><volfmt>2</volfmt></scidacFile>"),
				slRec,
				xmlRec(typeFileXML, "<info>generated</info>"),
			)
			f := field
			msgs := f.messages(typeScidacBinary, true) // sums over the whole lattice
			msgs[2].Data = data
			recs = append(recs, msgs...)
			recs = append(recs, global.messages(typeScidacBinary, true)...)
			out[v] = limeEncode(recs)
			continue
		}
		out[v] = limeEncode(append(message(slRec), message(limeRec{Type: typeScidacBinary, Data: data})...))
	}
	return out
}

// limeField returns the 4x4x2x2 test field: 64 sites of 24 bytes.
func limeField(seed byte) ([]int, scidacField) {
	dims := []int{4, 4, 2, 2}
	f := scidacField{typesize: 12, datacount: 2, kind: recordField, data: pattern(64*24, seed), ranks: seqRanks(64)}
	return dims, f
}

func limeGlobal() scidacField {
	return scidacField{typesize: 8, datacount: 3, kind: recordGlobal, data: pattern(24, 0x5a), ranks: seqRanks(1)}
}
