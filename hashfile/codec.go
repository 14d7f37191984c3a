package hashfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Format constants of kvtree hash files, version 1.
const (
	Magic      uint32 = 0x951fc3f5
	FileType   uint16 = 1
	Version    uint16 = 1
	FlagCRC    uint32 = 0x1
	HeaderSize        = 20
	crcSize           = 4

	// minElement is the smallest encoded element: an empty key's NUL and
	// its child's element count.
	minElement = 1 + 4

	// MaxDepth bounds the nesting of a decoded tree. SCR's files nest a
	// handful of levels; the bound keeps a hostile file from driving the
	// decoder into unbounded recursion.
	MaxDepth = 256
)

// ErrFormat is wrapped by every error that describes a malformed hash file.
var ErrFormat = errors.New("malformed kvtree hash")

// DecodeError says what is wrong with a hash file image and where.
type DecodeError struct {
	Offset int64 // byte offset of the problem, -1 for the file as a whole
	Msg    string
}

func (e *DecodeError) Error() string {
	if e.Offset < 0 {
		return e.Msg
	}
	return fmt.Sprintf("%s (at offset %d)", e.Msg, e.Offset)
}

// Unwrap makes errors.Is(err, ErrFormat) true for every DecodeError.
func (e *DecodeError) Unwrap() error { return ErrFormat }

func errAt(off int, format string, args ...any) error {
	return &DecodeError{Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// Decode parses a complete kvtree hash file image. An empty image is an
// empty tree, as in KVTree. The trailing CRC32 is checked when the header's
// flag asks for it; images without it are accepted. Element order is kept.
func Decode(b []byte) (*Tree, error) {
	if len(b) == 0 {
		return New(), nil
	}
	if len(b) < HeaderSize {
		return nil, errAt(len(b), "truncated header: %d of %d bytes", len(b), HeaderSize)
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != Magic {
		return nil, errAt(0, "bad magic %#08x, want %#08x", m, Magic)
	}
	if ft := binary.BigEndian.Uint16(b[4:]); ft != FileType {
		return nil, errAt(4, "unknown file type %d, want %d (hash)", ft, FileType)
	}
	if v := binary.BigEndian.Uint16(b[6:]); v != Version {
		return nil, errAt(6, "unknown version %d, want %d", v, Version)
	}
	size := binary.BigEndian.Uint64(b[8:])
	if size != uint64(len(b)) {
		return nil, &DecodeError{Offset: -1, Msg: fmt.Sprintf("size mismatch: header says %d bytes, file has %d", size, len(b))}
	}
	flags := binary.BigEndian.Uint32(b[16:])
	body := b[:len(b):len(b)]
	if flags&FlagCRC != 0 {
		if len(b) < HeaderSize+crcSize {
			return nil, errAt(len(b), "truncated: no room for the CRC32")
		}
		body = b[:len(b)-crcSize]
		stored := binary.BigEndian.Uint32(b[len(b)-crcSize:])
		if got := crc32.ChecksumIEEE(body); got != stored {
			return nil, errAt(len(body), "CRC mismatch: stored %#08x, computed %#08x", stored, got)
		}
	}
	d := decoder{b: body, off: HeaderSize, keys: map[string]string{}, slab: min(maxSlab, len(body)/minElement+1)}
	t, err := d.tree(0)
	if err != nil {
		return nil, err
	}
	if d.off != len(body) {
		return nil, errAt(d.off, "%d bytes of trailing data after the tree", len(body)-d.off)
	}
	if t == nil {
		t = New()
	}
	return t, nil
}

// decoder unpacks the tree of an image. Empty children and values are
// kept without a tree (see entry), its trees and entries are made a slab
// at a time, so that a transfer file of 100,000 entries costs a few
// hundred thousand allocations instead of two million, and short keys that
// repeat (SIZE, WRITTEN, 0) are shared.
type decoder struct {
	b       []byte
	off     int
	keys    map[string]string // short keys read so far
	slab    int               // trees or entries made at once
	trees   []Tree
	entries []entry
}

const (
	// maxSlab bounds decoder.slab: 32 KiB of trees, 24 KiB of entries.
	maxSlab = 1024
	// maxShort is the longest key shared through decoder.keys.
	maxShort = 16
	// maxShared bounds decoder.keys, so that a file of many distinct
	// short keys costs no more than one without sharing.
	maxShared = 1024
)

// key returns b as a string, the shared copy for a short key read before.
func (d *decoder) key(b []byte) string {
	if len(b) > maxShort {
		return string(b)
	}
	if s, ok := d.keys[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.keys) < maxShared {
		d.keys[s] = s
	}
	return s
}

// newTree returns an empty tree from the current slab.
func (d *decoder) newTree() *Tree {
	if len(d.trees) == 0 {
		d.trees = make([]Tree, d.slab)
	}
	t := &d.trees[0]
	d.trees = d.trees[1:]
	return t
}

// newEntries returns an empty slice with room for n entries, whose appends
// beyond n reallocate rather than overwrite a neighbour's.
func (d *decoder) newEntries(n int) []entry {
	if n > d.slab/4 {
		return make([]entry, 0, n)
	}
	if len(d.entries) < n {
		d.entries = make([]entry, d.slab)
	}
	e := d.entries[:0:n]
	d.entries = d.entries[n:]
	return e
}

// value decodes a value, a tree of one non-empty key with an empty child,
// if one is next; ok is false, and nothing consumed, for anything else.
func (d *decoder) value(depth int) (val string, ok bool) {
	b, off := d.b, d.off
	if depth+1 > MaxDepth || len(b)-off < 4 || binary.BigEndian.Uint32(b[off:]) != 1 {
		return "", false
	}
	n := bytes.IndexByte(b[off+4:], 0)
	end := off + 4 + n + 1
	if n <= 0 || len(b)-end < 4 || binary.BigEndian.Uint32(b[end:]) != 0 {
		return "", false
	}
	d.off = end + 4
	return d.key(b[off+4 : end-1]), true
}

// tree decodes a tree whose element count starts at d.off; an empty one is
// nil.
func (d *decoder) tree(depth int) (*Tree, error) {
	if depth > MaxDepth {
		return nil, errAt(d.off, "nesting deeper than %d levels", MaxDepth)
	}
	if len(d.b)-d.off < 4 {
		return nil, errAt(d.off, "truncated: element count needs 4 bytes, %d left", len(d.b)-d.off)
	}
	count := binary.BigEndian.Uint32(d.b[d.off:])
	countOff := d.off
	d.off += 4
	if count == 0 {
		return nil, nil
	}
	if room := uint64(len(d.b)-d.off) / minElement; uint64(count) > room {
		return nil, errAt(countOff, "element count %d exceeds what the remaining %d bytes can hold", count, len(d.b)-d.off)
	}
	t := d.newTree()
	t.entries = d.newEntries(int(count))
	if count > indexThreshold {
		t.index = make(map[string]int, count)
	}
	for range count {
		keyOff := d.off
		n := bytes.IndexByte(d.b[d.off:], 0)
		if n < 0 {
			return nil, errAt(keyOff, "truncated: key without NUL terminator")
		}
		kb := d.b[d.off : d.off+n]
		d.off += n + 1
		if t.hasBytes(kb) {
			return nil, errAt(keyOff, "duplicate key %q", kb)
		}
		t.entries = append(t.entries, entry{key: d.key(kb)})
		e := &t.entries[len(t.entries)-1]
		if t.index != nil {
			t.index[e.key] = len(t.entries) - 1
		}
		if val, ok := d.value(depth + 1); ok {
			e.val = val
			continue
		}
		sub, err := d.tree(depth + 1)
		if err != nil {
			return nil, err
		}
		e.sub.Store(sub)
	}
	return t, nil
}

// hasBytes is Has for a key in bytes, without making a string of it.
func (t *Tree) hasBytes(k []byte) bool {
	if t.index != nil {
		_, ok := t.index[string(k)]
		return ok
	}
	for i := range t.entries {
		if t.entries[i].key == string(k) {
			return true
		}
	}
	return false
}

// Encode returns the kvtree image of t exactly as KVTree writes it: header
// with the CRC flag set, the packed tree in t's order, and the CRC32.
func Encode(t *Tree) []byte {
	w := imageWriter{from: -1, exact: true}
	w.image(t, crc32.ChecksumIEEE)
	return w.b
}

// imageWriter lays out the image of a tree, the one walk of a tree in
// kvtree form: into a new buffer (Encode), over an older image held in
// the same buffer, noting where the two first differ, so that a rewrite
// of the file that holds the older image need only start there
// (overwriteImage), or only comparing it with an image, without
// decoding that image (matchImage).
type imageWriter struct {
	b     []byte // the image so far; from len(b) up to old, the older image
	old   int    // the length of the older image
	from  int    // where the images first differ; -1 while they agree
	check bool   // compare only: change nothing, stop at the first difference
	exact bool   // decoding the image gives back the tree: no key holds a NUL
}

// stopped reports whether a comparison has found its difference.
func (w *imageWriter) stopped() bool { return w.check && w.from >= 0 }

// put lays out p next.
func (w *imageWriter) put(p string) {
	pos := len(w.b)
	if w.from < 0 {
		o := w.b[pos:min(pos+len(p), max(w.old, pos))]
		if string(o) == p { // one memequal, not a loop: most bytes are the same
			w.b = w.b[:pos+len(p)]
			return
		}
		n := 0
		for n < len(o) && o[n] == p[n] {
			n++
		}
		w.from = pos + n
	}
	if w.check {
		return
	}
	if cap(w.b)-pos < len(p) {
		grown := make([]byte, pos, growCap(cap(w.b), w.old > 0)+len(p))
		copy(grown, w.b)
		w.b = grown
	}
	w.b = append(w.b, p...)
}

func (w *imageWriter) putUint32(v uint32) {
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], v)
	w.put(string(a[:]))
}

// image lays out the whole image of t: the header, the tree, the size in
// the header, and the CRC32 crc gives for the bytes before it.
func (w *imageWriter) image(t *Tree, crc func([]byte) uint32) {
	var h [HeaderSize]byte
	binary.BigEndian.PutUint32(h[0:], Magic)
	binary.BigEndian.PutUint16(h[4:], FileType)
	binary.BigEndian.PutUint16(h[6:], Version)
	if w.old >= 16 {
		copy(h[8:16], w.b[8:16]) // the size, known at the end
	}
	binary.BigEndian.PutUint32(h[16:], FlagCRC)
	w.put(string(h[:]))
	w.tree(t)
	if w.stopped() {
		return
	}
	var size [8]byte
	binary.BigEndian.PutUint64(size[:], uint64(len(w.b)+crcSize))
	if i := firstDiff(w.b[8:16], size[:]); i >= 0 {
		if w.from < 0 || w.from > 8+i {
			w.from = 8 + i
		}
		if w.check {
			return
		}
		copy(w.b[8:], size[:])
	}
	w.putUint32(crc(w.b))
	if w.from < 0 && !w.check {
		w.from = len(w.b) // a prefix of the older image, or all of it
	}
}

// growCap returns the capacity to which a full buffer of capacity c grows:
// doubled, so that a fresh image of megabytes is made in a few copies, but
// by an eighth past a MiB when the buffer held an older image, which a
// Store keeps: it then stays near the size of its image.
func growCap(c int, kept bool) int {
	if !kept || c < 1<<20 {
		return 2 * c
	}
	return c + c/8
}

// firstDiff returns where a and b, of one length, first differ, -1 nowhere.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// tree lays out t: its element count, then each key and its child.
func (w *imageWriter) tree(t *Tree) {
	w.putUint32(uint32(t.Len()))
	for i := range t.Len() {
		if w.stopped() {
			return
		}
		e := &t.entries[i]
		if strings.IndexByte(e.key, 0) >= 0 {
			w.exact = false
		}
		w.put(e.key)
		w.put("\x00")
		if sub := e.peek(); sub != nil || e.val == "" {
			w.tree(sub)
			continue
		}
		if strings.IndexByte(e.val, 0) >= 0 {
			w.exact = false
		}
		w.put("\x00\x00\x00\x01")
		w.put(e.val)
		w.put("\x00\x00\x00\x00\x00")
	}
}

// matchImage reports whether b is exactly the image of t whose CRC is crc,
// without decoding b.
func matchImage(b []byte, t *Tree, crc uint32) bool {
	w := imageWriter{b: b[:0], old: len(b), from: -1, check: true}
	w.image(t, func([]byte) uint32 { return crc })
	return w.from < 0 && len(w.b) == len(b)
}

// overwriteImage lays out the image of t over buf, which holds an older
// image, and returns it, where it first differs from the older one (its
// length if they are the same), and whether decoding it gives back t
// itself (false when a key holds a NUL byte: the image cuts it there).
func overwriteImage(buf []byte, t *Tree) (img []byte, from int, exact bool) {
	w := imageWriter{b: buf[:0], old: len(buf), from: -1, exact: true}
	w.image(t, crc32.ChecksumIEEE)
	return w.b, w.from, w.exact
}
