package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestFTIFFGenerated(t *testing.T) {
	// Checkpoint 5 shrinks variables 2 and 3 below their second container:
	// two empty containers with stale hashes, which FTI 1.6 itself rejects.
	empties := []int{0, 0, 0, 0, 2, 0}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for i, b := range ftiRun(o) {
			t.Run(fmt.Sprintf("%v/ckpt%d", o, i+1), func(t *testing.T) {
				rep, err := inspectBytes(t, "Ckpt.fti", b)
				wantValid(t, rep, err, FTIFF)
				if !slices.Equal(rep.Ranges, []Range{{Off: 0, Len: int64(len(b))}}) {
					t.Fatalf("ranges %v", rep.Ranges)
				}
				if !strings.Contains(rep.Detail, fmt.Sprintf("ckpt %d,", i+1)) || !strings.Contains(rep.Detail, fmt.Sprintf("(%d empty)", empties[i])) {
					t.Errorf("detail %q", rep.Detail)
				}
				if warned := len(rep.Warnings) == 1 && strings.Contains(rep.Warnings[0], "FTI 1.6 will reject"); warned != (empties[i] > 0) || len(rep.Warnings) > 1 {
					t.Errorf("warnings %q with %d empty containers", rep.Warnings, empties[i])
				}
			})
		}
	}
}

// ftiRecordOffsets returns the offsets of the block headers and chunk
// records of a well-formed little-endian FTI-FF file.
func ftiRecordOffsets(b []byte) (blocks, recs []int64) {
	m := decodeFTIMeta(b[len(b)-ftiMetaSize:], binary.LittleEndian)
	for off := m.dataSize; off < int64(len(b))-ftiMetaSize; {
		blocks = append(blocks, off)
		n := int64(binary.LittleEndian.Uint32(b[off:]))
		off += ftiBlockHeader
		for j := int64(0); j < n; j++ {
			recs = append(recs, off)
			off += ftiRecordSize
		}
	}
	return blocks, recs
}

// remeta rewrites the file meta of b after edit, with a matching myHash.
func remeta(b []byte, edit func(*ftiMeta)) []byte {
	at := len(b) - ftiMetaSize
	m := decodeFTIMeta(b[at:], binary.LittleEndian)
	edit(&m)
	m.myHash = m.computeHash()
	copy(b[at:], m.checksum[:])
	copy(b[at+33:], m.myHash[:])
	for i, v := range []int64{m.ckptSize, m.metaSize, m.dataSize, m.fs, m.maxFs, m.ptFs} {
		binary.LittleEndian.PutUint64(b[at+53+8*i:], uint64(v))
	}
	return b
}

func TestFTIFFCorrupt(t *testing.T) {
	files := ftiRun(binary.LittleEndian)
	ckpt5 := files[4] // has empty containers
	blocks, recs := ftiRecordOffsets(ckpt5)
	// Records of checkpoint 5 in file order: v1c0 v2c0 | v3c0 | v2c1 v3c1
	// (the last two empty).
	fptr := func(rec int) int64 { return int64(binary.LittleEndian.Uint64(ckpt5[recs[rec]+18:])) }
	put64 := func(off int64, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
	}
	put32 := func(off int64, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	}
	xor := func(off int64) func([]byte) []byte {
		return func(b []byte) []byte { b[off] ^= 0xff; return b }
	}
	size := int64(len(ckpt5))
	metaOff := size - ftiMetaSize
	tests := []struct {
		name  string
		patch func([]byte) []byte
		code  string // "" for valid
		want  string // in the message
	}{
		{"pad byte changed", xor(size - 1), "", ""},
		{"ckptId changed", xor(metaOff + 49), "", ""},
		{"data byte flipped", xor(fptr(2) + 17), "E_CHUNK_HASH", "variable id 3, container 0"},
		{"stored chunk hash flipped", xor(recs[1] + 50), "E_CHUNK_HASH", "variable id 2, container 0"},
		{"stale hash of an empty container flipped", xor(recs[4] + 42), "E_FILE_CHECKSUM", ""},
		{"dataSize flipped", xor(metaOff + 69), "E_META_HASH", "hash mismatch"},
		{"checksum digit changed", func(b []byte) []byte { b[metaOff+3] = 'x'; return b }, "E_META_HASH", ""},
		{"timestamp changed", xor(metaOff + 101), "E_META_HASH", ""},
		{"cut by 1 byte", func(b []byte) []byte { return b[:size-1] }, "E_META_HASH", "cut off after 105"},
		{"cut by 45 bytes", func(b []byte) []byte { return b[:size-45] }, "E_META_HASH", "cut off after 61"},
		{"extended by 10 bytes", func(b []byte) []byte { return append(b, make([]byte, 10)...) }, "E_META_HASH", "10 stray bytes"},
		{"extended by 40000 bytes", func(b []byte) []byte { return append(b, make([]byte, 40000)...) }, "E_META_HASH", "file extended"},
		{"checksum in upper case", func(b []byte) []byte {
			return remeta(b, func(m *ftiMeta) { copy(m.checksum[:], strings.ToUpper(string(m.checksum[:32]))) })
		}, "E_META_CHECKSUM_FMT", ""},
		{"ckptSize wrong", func(b []byte) []byte { return remeta(b, func(m *ftiMeta) { m.ckptSize++ }) }, "E_SIZE", ""},
		{"fs 2^63-1", func(b []byte) []byte { return remeta(b, func(m *ftiMeta) { m.fs = math.MaxInt64 }) }, "E_SIZE", ""},
		{"metaSize below 106", func(b []byte) []byte {
			return remeta(b, func(m *ftiMeta) { m.metaSize, m.dataSize = 100, size-100 })
		}, "E_SIZE", ""},
		{"metaSize 2^63-1", func(b []byte) []byte { return remeta(b, func(m *ftiMeta) { m.metaSize = math.MaxInt64 }) }, "E_SIZE", ""},
		{"dataSize negative", func(b []byte) []byte { return remeta(b, func(m *ftiMeta) { m.dataSize = -1 }) }, "E_SIZE", ""},
		{"dataSize moved into the table", func(b []byte) []byte {
			return remeta(b, func(m *ftiMeta) { m.dataSize += 12; m.metaSize -= 12 })
		}, "E_STRUCT", ""},
		{"hascontent 2", func(b []byte) []byte { b[recs[0]+8] = 2; return b }, "E_STRUCT", "hascontent is 2"},
		{"fptr off by one", put64(recs[1]+18, uint64(fptr(1))+1), "E_STRUCT", "fptr"},
		{"fptr 2^64-1", put64(recs[0]+18, math.MaxUint64), "E_STRUCT", "fptr"},
		{"containersize 2^64-1", put64(recs[0]+34, math.MaxUint64), "E_STRUCT", "runs past the data area"},
		{"chunksize above containersize", put64(recs[3]+26, 1<<40), "E_STRUCT", "exceeds its container"},
		{"containerid skips", put32(recs[3]+4, 2), "E_STRUCT", "containerid 2, want 1"},
		{"dptr wrong", put64(recs[3]+10, 1), "E_STRUCT", "dptr 1"},
		{"dbsize wrong", put64(blocks[1]+4, 1), "E_STRUCT", "dbsize 1"},
		{"dbsize negative", put64(blocks[0]+4, math.MaxUint64), "E_STRUCT", "dbsize -1"},
		{"numvars 0", put32(blocks[2], 0), "E_STRUCT", "numvars 0"},
		{"numvars 2^31-1", put32(blocks[2], math.MaxInt32), "E_STRUCT", "numvars 2147483647"},
		{"numvars negative", put32(blocks[0], 0xffffffff), "E_STRUCT", "numvars -1"},
		{"numvars one short", put32(blocks[2], 1), "E_STRUCT", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.patch(slices.Clone(ckpt5))
			rep, err := inspectBytes(t, "Ckpt5-Rank0.fti", b)
			if tc.code == "" {
				wantValid(t, rep, err, FTIFF)
				return
			}
			fe := wantCode(t, rep, err, FTIFF, tc.code)
			if !strings.Contains(fe.Msg, tc.want) {
				t.Fatalf("message %q does not contain %q", fe.Msg, tc.want)
			}
		})
	}
}

func TestFTIFFUndetectable(t *testing.T) {
	// FTI-FF has no magic number. Cut before the checkpoint's size field the
	// file is only data and a table, which nothing distinguishes from any
	// other file: under another name it is plain, under an FTI name the
	// claim fails.
	b := ftiRun(binary.LittleEndian)[0]
	for _, cut := range []int{ftiMetaSize - 60, ftiMetaSize, ftiMetaSize + 70} {
		rep, err := inspectBytes(t, "rank0.ckpt", b[:len(b)-cut])
		wantValid(t, rep, err, Plain)
		rep, err = inspectBytes(t, "Ckpt1-Rank0.fti", b[:len(b)-cut])
		wantCode(t, rep, err, FTIFF, "E_META_HASH")
	}
}

func TestFTIFFTooSmall(t *testing.T) {
	// The first 70 bytes of a file meta that says the file ends at 106.
	var m ftiMeta
	copy(m.checksum[:], strings.Repeat("ab", 16))
	b := make([]byte, 70)
	copy(b, m.checksum[:])
	binary.LittleEndian.PutUint64(b[53:], ftiMetaSize)
	rep, err := inspectBytes(t, "x", b)
	wantCode(t, rep, err, FTIFF, "E_TOO_SMALL")
}

// probeFTIFFBackward is the scan probeFTIFFTail made before it looked for
// NULs front to back: every NUL from the end, the first that ends an
// intact meta (or the start of one cut off where ckptSize says the file
// ends) wins. The probe must give the same answer on any input.
func probeFTIFFBackward(s *source) (ftiProbe, error) {
	var p ftiProbe
	win := min(s.size, ftiScanWindow+ftiMetaSize)
	if win < ftiChecksumLen+1 {
		return p, nil
	}
	base := s.size - win
	w := make([]byte, win)
	if err := s.readAt(w, base); err != nil {
		return p, err
	}
	decode := func(at int64) ftiMeta {
		return decodeFTIMetaAt(w[at-base:at-base+ftiMetaSize], at+ftiMetaSize)
	}
	if s.size >= ftiMetaSize {
		at := s.size - ftiMetaSize
		m := decode(at)
		if ok := m.intact(); ok || m.checksumOK() || m.ckptSize == s.size && m.fs == s.size {
			return ftiProbe{found: true, at: at, intact: ok, m: m}, nil
		}
	}
	for end := len(w); ; {
		nul := bytes.LastIndexByte(w[:end], 0)
		if nul < ftiChecksumLen {
			return p, nil
		}
		end = nul
		if !isLowerHex(w[nul-ftiChecksumLen : nul]) {
			continue
		}
		at := base + int64(nul-ftiChecksumLen)
		switch {
		case at+ftiMetaSize <= s.size:
			if m := decode(at); m.intact() {
				return ftiProbe{found: true, at: at, intact: true, m: m}, nil
			}
		case at+61 <= s.size:
			for _, order := range [...]binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
				if int64(order.Uint64(w[at-base+53:])) == at+ftiMetaSize {
					return ftiProbe{found: true, at: at}, nil
				}
			}
		}
	}
}

// checkProbeAgrees fails t when probeFTIFFTail and the backward scan
// disagree on b.
func checkProbeAgrees(t *testing.T, name string, b []byte) {
	t.Helper()
	src := func() *source {
		return &source{ctx: context.Background(), r: bytes.NewReader(b), size: int64(len(b)), path: name}
	}
	got, err1 := probeFTIFFTail(src())
	want, err2 := probeFTIFFBackward(src())
	if (err1 == nil) != (err2 == nil) || got != want {
		t.Fatalf("%s (%d bytes): probe found %+v (err %v), the backward scan %+v (err %v)", name, len(b), got, err1, want, err2)
	}
}

// TestProbeFTIFFMatchesBackwardScan: looking for the file meta's NUL front
// to back finds the meta a scan from the end finds, in checkpoints that
// are whole, extended by stray bytes, cut short, or have several
// hex-and-NUL runs near their end (the last intact one must win), and in
// random data.
func TestProbeFTIFFMatchesBackwardScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hexRun := []byte("0123456789abcdef0123456789abcdef\x00")
	var cases []struct {
		name string
		b    []byte
	}
	add := func(name string, b []byte) {
		cases = append(cases, struct {
			name string
			b    []byte
		}{name, b})
	}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for i, b := range ftiRun(o) {
			add(fmt.Sprintf("%v checkpoint %d", o, i), b)
			add(fmt.Sprintf("%v checkpoint %d cut by 50", o, i), b[:len(b)-50])
			add(fmt.Sprintf("%v checkpoint %d extended", o, i), append(slices.Clone(b), hexRun...))
			twice := append(slices.Clone(b), make([]byte, 300)...)
			add(fmt.Sprintf("%v checkpoint %d twice", o, i), append(twice, b[len(b)-ftiMetaSize:]...))
			// Two intact metas, then stray bytes: the later meta is the one.
			two := append(slices.Clone(b), b[len(b)-ftiMetaSize:]...)
			add(fmt.Sprintf("%v checkpoint %d two metas", o, i), append(two, "stray bytes"...))
		}
	}
	for i := range 200 {
		b := make([]byte, rng.IntN(3*ftiScanWindow))
		for k := range b {
			b[k] = byte(rng.IntN(256))
		}
		for range rng.IntN(6) {
			if len(b) > len(hexRun) {
				copy(b[rng.IntN(len(b)-len(hexRun)):], hexRun)
			}
		}
		add(fmt.Sprintf("random %d", i), b)
	}
	add("zeros", make([]byte, ftiScanWindow+ftiMetaSize+7))
	add("hex runs", bytes.Repeat(hexRun, 3000))
	for _, c := range cases {
		checkProbeAgrees(t, c.name, c.b)
	}
}

// FuzzFTIFFProbe: on any input, the probe and the backward scan agree.
func FuzzFTIFFProbe(f *testing.F) {
	for _, b := range ftiRun(binary.LittleEndian) {
		f.Add(b)
		f.Add(b[:len(b)-50])
		f.Add(append(slices.Clone(b), "0123456789abcdef0123456789abcdef\x00"...))
		f.Add(append(append(slices.Clone(b), b[len(b)-ftiMetaSize:]...), "stray bytes"...))
	}
	f.Add([]byte("0123456789abcdef0123456789abcdef\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkProbeAgrees(t, "input", b)
	})
}
