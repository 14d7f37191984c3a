package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

// sharedSamples returns the contents of the named files of a shared
// test-data folder, or nothing when the folder is absent.
func sharedSamples(f *testing.F, sub string, names ...string) map[string][]byte {
	dir, err := shareddata.Find(sub)
	if err != nil {
		return nil
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			f.Fatalf("shared sample: %v", err)
		}
		out[n] = b
	}
	return out
}

// fuzzInspect inspects every path of fsys and checks what any input must
// give: no panic, either a consistent report or a FormatError, and no
// allocation out of proportion to the input (a fixed allowance plus a
// multiple of its size, plus room for the companion paths reported).
func fuzzInspect(t *testing.T, fsys memFS, paths ...string) {
	in := 0
	for _, b := range fsys {
		in += len(b)
	}
	for _, p := range paths {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rep, err := inspect(context.Background(), fsys, p, Options{})
		runtime.ReadMemStats(&after)
		allowed := uint64(256<<10 + 8*in)
		if rep != nil {
			allowed += uint64(256 * len(rep.Companions))
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > allowed {
			t.Fatalf("%s: allocated %d bytes for %d bytes of input", p, got, in)
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("%s: error is not a FormatError: %v", p, err)
			}
			if rep == nil || rep.Kind != fe.Kind || fe.Code == "" || fe.Path != p {
				t.Fatalf("%s: report %+v for %v", p, rep, fe)
			}
			continue
		}
		sum := int64(0)
		for i, r := range rep.Ranges {
			if r.Len <= 0 || r.Off < 0 || r.End() > rep.Size || i > 0 && r.Off <= rep.Ranges[i-1].End() {
				t.Fatalf("%s: bad ranges %v for %d bytes", p, rep.Ranges, rep.Size)
			}
			sum += r.Len
		}
		if sum != rep.DataBytes || rep.Size != int64(len(fsys[p])) {
			t.Fatalf("%s: DataBytes %d, ranges %v, size %d", p, rep.DataBytes, rep.Ranges, rep.Size)
		}
	}
}

func FuzzSION(f *testing.F) {
	s := sharedSamples(f, "sion", "multifile_6t_2f.sion", "multifile_6t_2f.sion.000001", "single_4t_1blk.sion",
		"multiblk_4t_serial.sion", "bad_magic.sion", "bad_meta2_offset.sion")
	if s != nil {
		f.Add(s["multifile_6t_2f.sion"], s["multifile_6t_2f.sion.000001"])
		f.Add(s["single_4t_1blk.sion"], []byte(nil))
		f.Add(s["multiblk_4t_serial.sion"], []byte(nil))
		f.Add(s["bad_magic.sion"], []byte(nil))
		f.Add(s["bad_meta2_offset.sion"], []byte(nil))
	}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		specs := sionMultiSpec(o)
		specs[0].NFiles, specs[1].NFiles = 2, 2
		specs[0].Mapping = specs[0].Mapping[:4]
		a, _, _ := encodeSION(specs[0])
		b, _, _ := encodeSION(specs[1])
		f.Add(a, b)
		single, _, _ := encodeSION(sionBase(o))
		f.Add(single, []byte(nil))
	}
	f.Fuzz(func(t *testing.T, file0, file1 []byte) {
		fsys := memFS{"/f/s.sion": file0, "/f/s.sion.000001": file1}
		fuzzInspect(t, fsys, "/f/s.sion", "/f/s.sion.000001")
	})
}

func FuzzFTIFF(f *testing.F) {
	s := sharedSamples(f, "ftiff", "Ckpt1-Rank0.fti", "Ckpt7-Rank1.fti", "Ckpt5-Rank0.meta-flip.fti")
	for _, b := range s {
		f.Add(b)
	}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, b := range ftiRun(o) {
			f.Add(b)
			f.Add(b[:len(b)-50])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzInspect(t, memFS{"/f/Ckpt1-Rank0.fti": b}, "/f/Ckpt1-Rank0.fti")
	})
}

func FuzzLIME(f *testing.F) {
	s := sharedSamples(f, "lime", "su3_4x4x4x8_f.lime", "su3_4x4x4x8_ildg.lime",
		"su3_4x4x4x8_part.lime.vol0000", "su3_4x4x4x8_part.lime.vol0001")
	if s != nil {
		f.Add(s["su3_4x4x4x8_f.lime"], []byte(nil))
		f.Add(s["su3_4x4x4x8_ildg.lime"], []byte(nil))
		f.Add(s["su3_4x4x4x8_part.lime.vol0000"], s["su3_4x4x4x8_part.lime.vol0001"])
	}
	dims, field := limeField(1)
	lo, hi := []int{1, 0, 0, 1}, []int{2, 3, 1, 1}
	cube := hyperRanksOf(dims, lo, hi)
	hyper := scidacField{typesize: 5, datacount: 3, kind: recordHypercube, lo: lo, hi: hi, data: pattern(15*len(cube), 9), ranks: cube}
	f.Add(scidacSingle(dims, field, limeGlobal(), hyper), []byte(nil))
	vols := scidacPartition(dims, field, limeGlobal(), 2, func(r int) int { return r % 2 })
	f.Add(vols[0], vols[1])
	f.Add(limeEncode(message(limeRec{Type: "a", Data: []byte("12345")}, limeRec{Type: "b"})), []byte(nil))
	f.Fuzz(func(t *testing.T, vol0, vol1 []byte) {
		fsys := memFS{"/f/c.lime.vol0000": vol0, "/f/c.lime.vol0001": vol1}
		fuzzInspect(t, fsys, "/f/c.lime.vol0000", "/f/c.lime.vol0001")
	})
}
