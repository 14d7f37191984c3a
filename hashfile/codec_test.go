package hashfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

// sharedFiles are the KVTree-written samples with their printed forms.
var sharedFiles = []string{
	"flush.scr",
	"transfer_library.scrinfo",
	"transfer_done_by_scr_transfer.scrinfo",
	"transfer_1000_files.scrinfo",
}

func TestGoldenSharedFiles(t *testing.T) {
	dir := shareddata.Dir(t, "kvtree")
	for _, name := range sharedFiles {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			tree, err := Decode(raw)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got := Encode(tree); !bytes.Equal(got, raw) {
				t.Fatalf("re-encode differs from the KVTree file (%d vs %d bytes)", len(got), len(raw))
			}
			txt, err := os.ReadFile(filepath.Join(dir, name+".txt"))
			if errors.Is(err, os.ErrNotExist) {
				return // no printed form shipped for this one
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := Format(tree, 2); got != string(txt) {
				t.Fatalf("printed form differs from KVTree's\n got:\n%s\nwant:\n%s", got, txt)
			}
			parsed, err := Parse(bytes.NewReader(txt))
			if err != nil {
				t.Fatalf("parse printed form: %v", err)
			}
			if !bytes.Equal(Encode(parsed), raw) {
				t.Fatal("parsing the printed form and encoding does not give back the KVTree file")
			}
		})
	}
}

func TestSharedTransferValues(t *testing.T) {
	tree, err := NewStore(shareddata.File(t, "kvtree", "transfer_library.scrinfo"), Flock).Read()
	if err != nil {
		t.Fatal(err)
	}
	bw, ok, err := tree.Float("BW")
	if err != nil || !ok || bw != 52428800 {
		t.Fatalf("BW = %v, %v, %v; want 52428800", bw, ok, err)
	}
	f := tree.Lookup("FILES", "/tmp/user1/scr.1001186/index.0/dataset.1/rank_0.ckpt")
	size, ok, err := f.Uint("SIZE")
	if err != nil || !ok || size != 524294 {
		t.Fatalf("SIZE = %v, %v, %v; want 524294", size, ok, err)
	}
	if v, _ := tree.Value("COMMAND"); v != "RUN" {
		t.Fatalf("COMMAND = %q, want RUN", v)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := Encode(sampleTree())
	patch := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	fixCRC := func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"short header", good[:10], "truncated header: 10 of 20 bytes"},
		{"bad magic", patch(func(b []byte) []byte { b[0] = 0; return b }), "bad magic 0x001fc3f5"},
		{"unknown type", patch(func(b []byte) []byte { b[5] = 2; return b }), "unknown file type 2"},
		{"unknown version", patch(func(b []byte) []byte { b[7] = 9; return b }), "unknown version 9"},
		{"size mismatch", good[:len(good)-7], fmt.Sprintf("size mismatch: header says %d bytes, file has %d", len(good), len(good)-7)},
		{"crc mismatch", patch(func(b []byte) []byte { b[HeaderSize+6] ^= 0x40; return b }), "CRC mismatch: stored"},
		{"huge count", patch(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[HeaderSize:], 0xffffffff)
			return fixCRC(b)
		}), "element count 4294967295 exceeds what the remaining"},
		{"key without NUL", patch(func(b []byte) []byte {
			for i := HeaderSize + 4; i < len(b)-4; i++ {
				if b[i] == 0 {
					b[i] = 'x'
				}
			}
			return fixCRC(b)
		}), "truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in)
			if err == nil {
				t.Fatal("decode accepted a damaged image")
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestDecodeWithoutCRC(t *testing.T) {
	img := Encode(sampleTree())
	noCRC := bytes.Clone(img[:len(img)-4])
	binary.BigEndian.PutUint64(noCRC[8:], uint64(len(noCRC)))
	binary.BigEndian.PutUint32(noCRC[16:], 0)
	tree, err := Decode(noCRC)
	if err != nil {
		t.Fatalf("a file without CRC must be accepted: %v", err)
	}
	if !tree.Equal(sampleTree()) {
		t.Fatal("tree read from a file without CRC differs")
	}
}

func TestDecodeDepthBound(t *testing.T) {
	// A chain of empty keys nested MaxDepth+10 deep.
	body := []byte{}
	for range MaxDepth + 10 {
		body = append(body, 0, 0, 0, 1, 0)
	}
	body = append(body, 0, 0, 0, 0)
	img := make([]byte, HeaderSize, HeaderSize+len(body)+4)
	binary.BigEndian.PutUint32(img[0:], Magic)
	binary.BigEndian.PutUint16(img[4:], FileType)
	binary.BigEndian.PutUint16(img[6:], Version)
	binary.BigEndian.PutUint64(img[8:], uint64(HeaderSize+len(body)+4))
	binary.BigEndian.PutUint32(img[16:], FlagCRC)
	img = append(img, body...)
	img = binary.BigEndian.AppendUint32(img, crc32.ChecksumIEEE(img))
	_, err := Decode(img)
	if err == nil || !strings.Contains(err.Error(), "nesting deeper than") {
		t.Fatalf("deep nesting: got %v", err)
	}
}

func TestDecodeDuplicateKey(t *testing.T) {
	body := []byte{0, 0, 0, 2, 'A', 0, 0, 0, 0, 0, 'A', 0, 0, 0, 0, 0}
	img := binary.BigEndian.AppendUint32(nil, Magic)
	img = binary.BigEndian.AppendUint16(img, FileType)
	img = binary.BigEndian.AppendUint16(img, Version)
	img = binary.BigEndian.AppendUint64(img, uint64(HeaderSize+len(body)+4))
	img = binary.BigEndian.AppendUint32(img, FlagCRC)
	img = append(img, body...)
	img = binary.BigEndian.AppendUint32(img, crc32.ChecksumIEEE(img))
	if _, err := Decode(img); err == nil || !strings.Contains(err.Error(), `duplicate key "A"`) {
		t.Fatalf("duplicate key: got %v", err)
	}
}

func TestEmptyImageIsEmptyTree(t *testing.T) {
	tree, err := Decode(nil)
	if err != nil || tree.Len() != 0 {
		t.Fatalf("empty image: %v, %d keys", err, tree.Len())
	}
}

func sampleTree() *Tree {
	t := New()
	f := t.Set("FILES").Set("/cache/rank_0.ckpt")
	f.SetValue("DESTINATION", "/pfs/rank_0.ckpt")
	f.SetUint("SIZE", 524294)
	f.SetUint("WRITTEN", 0)
	t.SetFloat("BW", 52428800)
	t.SetFloat("PERCENT", 0)
	t.SetValue("COMMAND", "RUN")
	return t
}

// randomTree builds a tree of random shape with keys that stress the text
// and binary forms (spaces inside, UTF-8, empty keys are left to the binary
// round trip only).
func randomTree(r *rand.Rand, depth int, textSafe bool) *Tree {
	t := New()
	n := r.IntN(6)
	if depth == 0 {
		n = r.IntN(30)
	}
	for range n {
		key := randomKey(r, textSafe)
		if t.Has(key) {
			continue
		}
		if depth < 5 && r.IntN(3) > 0 {
			t.SetTree(key, randomTree(r, depth+1, textSafe))
		} else {
			t.Set(key)
		}
	}
	return t
}

func randomKey(r *rand.Rand, textSafe bool) string {
	const alphabet = "abcXYZ019_./-é "
	runes := []rune(alphabet)
	n := r.IntN(12)
	if textSafe {
		n++
	}
	var b strings.Builder
	for i := range n {
		c := runes[r.IntN(len(runes))]
		if textSafe && c == ' ' && (i == 0 || i == n-1) {
			c = 'k'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		tree := randomTree(r, 0, i%2 == 0)
		img := Encode(tree)
		back, err := Decode(img)
		if err != nil {
			t.Fatalf("trial %d: decode of own encoding: %v", i, err)
		}
		if !back.Equal(tree) || !bytes.Equal(Encode(back), img) {
			t.Fatalf("trial %d: binary round trip changed the tree", i)
		}
		if i%2 == 0 {
			parsed, err := Parse(strings.NewReader(Format(tree, i%7)))
			if err != nil {
				t.Fatalf("trial %d: parse of own print: %v", i, err)
			}
			if !parsed.Equal(tree) {
				t.Fatalf("trial %d: text round trip changed the tree:\n%s", i, Format(tree, 0))
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	if dir, err := shareddata.Find("kvtree"); err == nil {
		for _, name := range sharedFiles {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && len(b) < 4096 {
				f.Add(b)
			}
		}
	}
	f.Add(Encode(sampleTree()))
	f.Add(Encode(New()))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tree, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode to a decodable, equal tree.
		img := Encode(tree)
		again, err := Decode(img)
		if err != nil || !again.Equal(tree) {
			t.Fatalf("re-encoding a decoded tree broke it: %v", err)
		}
		// Values and empty children are kept without trees until asked
		// for: a copy whose every child was asked for is the same tree.
		c := tree.Clone()
		_ = c.Walk(func([]string, *Tree) error { return nil })
		if !c.Equal(tree) || !tree.Equal(c) || !bytes.Equal(Encode(c), img) || Format(c, 0) != Format(tree, 0) {
			t.Fatal("a tree whose children were all asked for differs from the decoded one")
		}
	})
}
