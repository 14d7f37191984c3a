package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// salvaged is what salvage recovered from a kvtree image that does not
// decode, and what it found wrong.
type salvaged struct {
	tree     *hashfile.Tree
	problems []string // what is wrong with the image as a whole: header, size, CRC
	dropped  []string // what was left out, each named by its path of keys
	// cut is the path of keys to the element being decoded where decoding
	// had to stop; nil when the tree decoded to its end.
	cut []string
}

// salvage decodes what it can of the kvtree image b (hashfile's format:
// a 20-byte header, then the tree, each tree an element count and that
// many NUL-terminated keys each followed by its child tree, then a CRC32
// when the header asks for one). Unlike hashfile.Decode it does not give
// up at the first problem: a header, size or CRC that is wrong is noted
// and the tree is read all the same, a duplicate key is left out, and where
// the bytes stop making sense (a key without its NUL, an element count or
// a child that runs past the end) it keeps every element decoded before
// that point, at every level, and drops the rest: the bytes after it
// cannot be told apart from garbage.
func salvage(b []byte) salvaged {
	s := salvaged{tree: hashfile.New()}
	if len(b) < hashfile.HeaderSize {
		s.problems = append(s.problems, fmt.Sprintf("truncated header: %d of %d bytes; nothing to keep", len(b), hashfile.HeaderSize))
		s.cut = []string{}
		return s
	}
	end := s.checkHeader(b)
	d := salvager{b: b[:end], off: hashfile.HeaderSize, out: &s}
	if t, whole := d.tree(0, nil); t != nil {
		s.tree = t
		if whole && d.off < end {
			s.problems = append(s.problems, fmt.Sprintf("%d bytes of trailing data after the tree (at offset %d), left out", end-d.off, d.off))
		}
	}
	return s
}

// checkHeader notes what is wrong with the header and the CRC, and returns
// where the tree's bytes end.
func (s *salvaged) checkHeader(b []byte) (end int) {
	if m := binary.BigEndian.Uint32(b[0:]); m != hashfile.Magic {
		s.problems = append(s.problems, fmt.Sprintf("bad magic %#08x, want %#08x: not a kvtree hash file, or its header is damaged", m, hashfile.Magic))
	}
	if ft, v := binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:]); ft != hashfile.FileType || v != hashfile.Version {
		s.problems = append(s.problems, fmt.Sprintf("file type %d version %d, want %d and %d", ft, v, hashfile.FileType, hashfile.Version))
	}
	end = len(b)
	switch size := binary.BigEndian.Uint64(b[8:]); {
	case size >= hashfile.HeaderSize && size < uint64(len(b)):
		// A longer file than its image: the stale tail a killed
		// rewrite leaves, which readers ignore.
		end = int(size)
	case size != uint64(len(b)):
		s.problems = append(s.problems, fmt.Sprintf("size mismatch: header says %d bytes, file has %d (truncated?)", size, len(b)))
	}
	if binary.BigEndian.Uint32(b[16:])&hashfile.FlagCRC != 0 && end >= hashfile.HeaderSize+4 {
		stored := binary.BigEndian.Uint32(b[end-4:])
		if got := crc32.ChecksumIEEE(b[:end-4]); got != stored {
			s.problems = append(s.problems, fmt.Sprintf("CRC mismatch: stored %#08x, computed %#08x: the bytes changed after they were written", stored, got))
		}
		end -= 4
	}
	return end
}

// salvager reads a tree as far as its bytes make sense.
type salvager struct {
	b   []byte
	off int
	out *salvaged
}

// stop records that decoding stopped at path for why.
func (d *salvager) stop(path []string, why string) {
	d.out.cut = append([]string{}, path...)
	d.out.dropped = append(d.out.dropped, fmt.Sprintf("%s: %s (at offset %d); everything after it in the file is lost", pathText(path), why, d.off))
}

// tree reads a tree at path; whole is false when decoding had to stop in
// it, and t then holds the elements decoded before that point (nil for
// none).
func (d *salvager) tree(depth int, path []string) (t *hashfile.Tree, whole bool) {
	if depth > hashfile.MaxDepth {
		d.stop(path, fmt.Sprintf("nesting deeper than %d levels", hashfile.MaxDepth))
		return nil, false
	}
	if len(d.b)-d.off < 4 {
		d.stop(path, "truncated: no element count")
		return nil, false
	}
	count := binary.BigEndian.Uint32(d.b[d.off:])
	d.off += 4
	t = hashfile.New()
	for i := uint32(0); i < count; i++ {
		n := bytes.IndexByte(d.b[d.off:], 0)
		if n < 0 {
			d.stop(path, fmt.Sprintf("element %d of %d: truncated key, no NUL", i+1, count))
			return t, false
		}
		key := string(d.b[d.off : d.off+n])
		d.off += n + 1
		sub, whole := d.tree(depth+1, append(path, key))
		switch {
		case t.Has(key):
			d.out.dropped = append(d.out.dropped, fmt.Sprintf("%s: a second element with this key, left out (the first is kept)", pathText(append(path, key))))
		case sub != nil || whole:
			t.SetTree(key, sub)
		}
		if !whole {
			return t, false
		}
	}
	return t, true
}

// pathText writes a path of keys as "FILES/…/rank_0.ckpt", "(the top level)"
// for none.
func pathText(path []string) string {
	if len(path) == 0 {
		return "(the top level)"
	}
	return strings.Join(path, "/")
}
