package hashfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"strings"
	"unsafe"
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
	d := decoder{b: body, off: HeaderSize, slab: min(maxSlab, len(body)/minElement+1)}
	d.chunk = min(maxChunk, len(body))
	t, err := d.tree(0)
	if err != nil {
		return nil, err
	}
	if d.off != len(body) {
		return nil, errAt(d.off, "%d bytes of trailing data after the tree", len(body)-d.off)
	}
	if t == nil {
		t = &Tree{}
	}
	return t, nil
}

// decoder unpacks the tree. Trees and entry arrays come from slabs, empty
// children are left nil (see entry), and keys are copied into large shared
// blocks, short ones that repeat (SIZE, WRITTEN, 0) only once, so that a
// transfer file of thousands of entries costs a few allocations per
// thousand keys and its tree does not keep the image alive.
type decoder struct {
	b       []byte
	off     int
	slab    int // trees or entries allocated at once
	trees   []Tree
	entries []entry
	text    []byte     // the block keys are copied into, never changed once written
	chunk   int        // its size
	recent  [64]string // short keys, by a hash of length and ends
}

const (
	maxSlab  = 2048 // 64 KiB of trees, 80 KiB of entries
	maxChunk = 256 << 10
	// maxShort is the longest key looked up among recent keys.
	maxShort = 16
)

func (d *decoder) newTree() *Tree {
	if len(d.trees) == 0 {
		d.trees = make([]Tree, d.slab)
	}
	t := &d.trees[0]
	d.trees = d.trees[1:]
	return t
}

// newEntries returns an empty slice with room for n entries whose appends
// beyond n reallocate rather than overwrite a neighbour.
func (d *decoder) newEntries(n int) []entry {
	if n > d.slab/4 {
		e := make([]entry, 0, n)
		return e
	}
	if len(d.entries) < n {
		d.entries = make([]entry, d.slab)
	}
	e := d.entries[:0:n]
	d.entries = d.entries[n:]
	return e
}

// key returns b as a string, sharing a recent equal key if there is one.
func (d *decoder) key(b []byte) string {
	if len(b) > maxShort {
		return d.copyKey(b)
	}
	h := 0
	if len(b) > 0 {
		h = (len(b)*131 + int(b[0])*31 + int(b[len(b)-1])) % len(d.recent)
	}
	if r := d.recent[h]; r == string(b) {
		return r
	}
	s := d.copyKey(b)
	d.recent[h] = s
	return s
}

// copyKey copies b to the current block. Bytes written to a block are
// never changed, so the strings cut from it stay valid.
func (d *decoder) copyKey(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(d.text)-len(d.text) < len(b) {
		d.text = make([]byte, 0, max(d.chunk, len(b)))
	}
	start := len(d.text)
	d.text = append(d.text, b...)
	// As strings.Builder does: the bytes are never written again, and
	// appends beyond the block's capacity go to a new block.
	return unsafe.String(&d.text[start], len(b))
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

// tree decodes a tree; an empty one is nil.
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
		t.x = &extra{seed: maphash.MakeSeed(), slots: make([]int32, slotsFor(int(count)))}
	}
	for range count {
		keyOff := d.off
		n := bytes.IndexByte(d.b[d.off:], 0)
		if n < 0 {
			return nil, errAt(keyOff, "truncated: key without NUL terminator")
		}
		kb := d.b[d.off : d.off+n]
		d.off += n + 1
		var key string
		if t.x != nil {
			key = d.key(kb)
			if !t.x.addNew(t.entries, key, len(t.entries)) {
				return nil, errAt(keyOff, "duplicate key %q", key)
			}
		} else {
			for i := range t.entries {
				if t.entries[i].key == string(kb) {
					return nil, errAt(keyOff, "duplicate key %q", kb)
				}
			}
			key = d.key(kb)
		}
		if val, ok := d.value(depth + 1); ok {
			t.entries = append(t.entries, entry{key: key, val: val})
		} else {
			sub, err := d.tree(depth + 1)
			if err != nil {
				return nil, err
			}
			t.entries = append(t.entries, entry{key: key, sub: unsafe.Pointer(sub)})
		}
	}
	return t, nil
}

// EncodedSize returns the length of t's encoded image, header and CRC included.
func EncodedSize(t *Tree) int { return HeaderSize + treeSize(t) + crcSize }

func treeSize(t *Tree) int {
	n := 4
	for i := range t.Len() {
		e := &t.entries[i]
		n += len(e.key) + 1
		if sub := e.peek(); sub != nil || e.val == "" {
			n += treeSize(sub)
		} else {
			n += 4 + len(e.val) + 1 + 4
		}
	}
	return n
}

// Encode returns the kvtree image of t exactly as KVTree writes it: header
// with the CRC flag set, the packed tree in t's order, and the CRC32.
func Encode(t *Tree) []byte {
	return AppendEncode(make([]byte, 0, EncodedSize(t)), t)
}

// AppendEncode appends the image of t to b and returns the extended slice.
func AppendEncode(b []byte, t *Tree) []byte {
	b, _ = appendImage(b, t)
	return b
}

// appendImage is AppendEncode, also reporting whether decoding the image
// gives back t itself: false when a key holds a NUL byte (the image cuts it
// there) or when a tree may be the child of two keys (SetTree was given a
// tree already placed), since the decoded copies would then be separate.
func appendImage(b []byte, t *Tree) ([]byte, bool) {
	if t == nil {
		t = New()
	}
	start := len(b)
	b = binary.BigEndian.AppendUint32(b, Magic)
	b = binary.BigEndian.AppendUint16(b, FileType)
	b = binary.BigEndian.AppendUint16(b, Version)
	b = binary.BigEndian.AppendUint64(b, 0) // the size, known at the end
	b = binary.BigEndian.AppendUint32(b, FlagCRC)
	b, exact := appendTree(b, t)
	binary.BigEndian.PutUint64(b[start+8:], uint64(len(b)-start+crcSize))
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[start:])), exact && !t.isShared()
}

func appendTree(b []byte, t *Tree) ([]byte, bool) {
	b = binary.BigEndian.AppendUint32(b, uint32(t.Len()))
	exact := true
	for i := range t.Len() {
		e := &t.entries[i]
		sub := e.peek()
		if strings.IndexByte(e.key, 0) >= 0 || sub.isShared() {
			exact = false
		}
		b = append(b, e.key...)
		b = append(b, 0)
		if sub == nil && e.val != "" {
			if strings.IndexByte(e.val, 0) >= 0 {
				exact = false
			}
			b = binary.BigEndian.AppendUint32(b, 1)
			b = append(b, e.val...)
			b = append(b, 0, 0, 0, 0, 0)
			continue
		}
		var ok bool
		b, ok = appendTree(b, sub)
		exact = exact && ok
	}
	return b, exact
}

// matchImage reports whether b is exactly the image of t whose CRC is crc
// (as appendImage made it), without decoding b: the walk compares the
// bytes of b with the tree's as they would be written.
func matchImage(b []byte, t *Tree, crc uint32) bool {
	if len(b) < HeaderSize+crcSize ||
		binary.BigEndian.Uint32(b) != Magic ||
		binary.BigEndian.Uint16(b[4:]) != FileType ||
		binary.BigEndian.Uint16(b[6:]) != Version ||
		binary.BigEndian.Uint64(b[8:]) != uint64(len(b)) ||
		binary.BigEndian.Uint32(b[16:]) != FlagCRC ||
		binary.BigEndian.Uint32(b[len(b)-crcSize:]) != crc {
		return false
	}
	body := b[:len(b)-crcSize]
	off, ok := matchTree(body, HeaderSize, t)
	return ok && off == len(body)
}

func matchTree(b []byte, off int, t *Tree) (int, bool) {
	if len(b)-off < 4 || binary.BigEndian.Uint32(b[off:]) != uint32(t.Len()) {
		return 0, false
	}
	off += 4
	for i := range t.Len() {
		e := &t.entries[i]
		end := off + len(e.key)
		if end >= len(b) || string(b[off:end]) != e.key || b[end] != 0 {
			return 0, false
		}
		off = end + 1
		if sub := e.peek(); sub == nil && e.val != "" {
			end = off + 4 + len(e.val)
			if end+5 > len(b) || binary.BigEndian.Uint32(b[off:]) != 1 || string(b[off+4:end]) != e.val ||
				b[end] != 0 || binary.BigEndian.Uint32(b[end+1:]) != 0 {
				return 0, false
			}
			off = end + 5
			continue
		} else {
			var ok bool
			if off, ok = matchTree(b, off, sub); !ok {
				return 0, false
			}
		}
	}
	return off, true
}

// overwriter encodes an image over an older one held in the same buffer,
// noting where the two first differ: a rewrite of the file, which holds the
// older image, need only start there.
type overwriter struct {
	b    []byte // the new image so far; from len(b) to old, the old image
	old  int    // the length of the old image
	from int    // where the images first differ; -1 while they agree
}

func (w *overwriter) put(p string) {
	pos := len(w.b)
	if w.from < 0 {
		n := min(len(p), max(w.old-pos, 0))
		o := w.b[pos : pos+n]
		if string(o) == p[:n] {
			if n == len(p) {
				w.b = w.b[:pos+n] // the same bytes are there already
				return
			}
			w.from = pos + n
		} else {
			i := 0
			for o[i] == p[i] {
				i++
			}
			w.from = pos + i
		}
	}
	w.b = append(w.b, p...)
}

func (w *overwriter) putUint32(v uint32) {
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], v)
	w.put(string(a[:]))
}

// overwriteImage encodes the image of t into buf, which holds an older
// image, and returns it, where it first differs from the older one (its
// length if they are the same), and whether decoding it gives back t
// itself (see appendImage).
func overwriteImage(buf []byte, t *Tree) (img []byte, from int, exact bool) {
	if t == nil {
		t = New()
	}
	w := overwriter{b: buf[:0], old: len(buf), from: -1}
	var h [HeaderSize]byte
	binary.BigEndian.PutUint32(h[0:], Magic)
	binary.BigEndian.PutUint16(h[4:], FileType)
	binary.BigEndian.PutUint16(h[6:], Version)
	if len(buf) >= 16 {
		copy(h[8:16], buf[8:16]) // the size, known at the end
	}
	binary.BigEndian.PutUint32(h[16:], FlagCRC)
	w.put(string(h[:]))
	exact = w.tree(t) && !t.isShared()
	var size [8]byte
	binary.BigEndian.PutUint64(size[:], uint64(len(w.b)+crcSize))
	for i := range size {
		if w.b[8+i] != size[i] {
			if w.from < 0 || w.from > 8+i {
				w.from = 8 + i
			}
			break
		}
	}
	copy(w.b[8:], size[:])
	w.putUint32(crc32.ChecksumIEEE(w.b))
	if w.from < 0 {
		w.from = len(w.b) // a prefix of the older image, or all of it
	}
	return w.b, w.from, exact
}

func (w *overwriter) tree(t *Tree) bool {
	w.putUint32(uint32(t.Len()))
	exact := true
	for i := range t.Len() {
		e := &t.entries[i]
		sub := e.peek()
		if strings.IndexByte(e.key, 0) >= 0 || sub.isShared() {
			exact = false
		}
		w.put(e.key)
		w.put("\x00")
		if sub == nil && e.val != "" {
			if strings.IndexByte(e.val, 0) >= 0 {
				exact = false
			}
			w.put("\x00\x00\x00\x01")
			w.put(e.val)
			w.put("\x00\x00\x00\x00\x00")
			continue
		}
		exact = w.tree(sub) && exact
	}
	return exact
}
