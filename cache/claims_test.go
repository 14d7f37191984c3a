package cache

import (
	"encoding/binary"
	"testing"
)

// TestNameClaims: a file whose content matches no format but whose name
// claims one is a damaged file of that kind, never a sound plain file; the
// same bytes under a name that claims nothing are plain.
func TestNameClaims(t *testing.T) {
	dims, field := limeField(3)
	lime := scidacSingle(dims, field)
	limeZeroed := append([]byte(nil), lime...)
	copy(limeZeroed, []byte{0, 0, 0, 0, 0, 0, 0, 0}) // magic, version and flags
	sion, _, _ := encodeSION(sionSpec{Order: binary.LittleEndian, Format: 5, FSBlock: 4096, NFiles: 1,
		Tasks: []sionTask{{Rank: 0, Chunk: 3000, Blocks: []int64{2500}}, {Rank: 1, Chunk: 5000, Blocks: []int64{4096}}}})
	sionZeroed := append([]byte(nil), sion[:4096]...) // the header alone, magic and version zeroed
	copy(sionZeroed, make([]byte, 20))
	plain := pattern(10000, 7)
	tests := []struct {
		name     string
		data     []byte
		wantKind Kind
		wantCode string // "" = sound
	}{
		{"zeroed.lime", limeZeroed, LIME, "E_BAD_MAGIC"},
		{"zeroed.ildg", limeZeroed, LIME, "E_BAD_MAGIC"},
		{"zeroed.scidac.vol0001", limeZeroed, LIME, "E_BAD_MAGIC"},
		{"zeroed.dat", limeZeroed, Plain, ""},
		{"zeroed.sion", sionZeroed, SION, "E_BAD_MAGIC"},
		{"zeroed.sion.000002", sionZeroed, SION, "E_BAD_MAGIC"},
		{"zeroed.bin", sionZeroed, Plain, ""},
		{"cut.fti", plain, FTIFF, "E_META_HASH"},
		{"CUT.FTI", plain, FTIFF, "E_META_HASH"},
		{"plain.ckpt", plain, Plain, ""},
		{"sion.ckpt", plain, Plain, ""}, // the claim is the suffix, not a word in the name
		{"sound.lime", lime, LIME, ""},
		{"sound.sion", sion, SION, ""},
	}
	for _, tc := range tests {
		rep, err := inspectBytes(t, tc.name, tc.data)
		if tc.wantCode == "" {
			if err != nil || rep.Kind != tc.wantKind {
				t.Errorf("%s: %v, %v; want a sound %s file", tc.name, rep, err, tc.wantKind)
			}
			continue
		}
		wantCode(t, rep, err, tc.wantKind, tc.wantCode)
	}
}
