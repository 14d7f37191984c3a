// Package hashfile reads and writes kvtree hash files, the binary format SCR's
// library and its flush daemon use for the transfer file, byte for byte as the
// KVTree C library does, and shares them between processes with KVTree's
// locking discipline (lock, read, modify, rewrite in place, fsync, unlock).
package hashfile

import (
	"fmt"
	"hash/maphash"
	"iter"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// indexThreshold is the number of keys above which a Tree keeps an index
// from key to position, so that lookups in a FILES subtree of thousands of
// entries stay O(1) while small trees stay cheap.
const indexThreshold = 16

// Tree is a kvtree: an ordered set of unique keys, each with a child tree.
// A value is stored as a key whose child holds exactly one key with an empty
// child, as KVTree does (SIZE → 524294 → {}). The order of keys is the order
// they were read or added in; it carries no meaning in the protocol but is
// preserved so that decoding and re-encoding a file keeps its bytes.
//
// A Tree may be read from several goroutines at once; a change must not
// overlap any other use.
type Tree struct {
	entries []entry
	x       *extra // nil for most trees
}

// extra holds what few trees need: the index of a large tree, and the
// marks that tell whether a tree may sit under two keys at once (an image
// decodes to separate copies, so a Store must not keep such a tree).
type extra struct {
	seed  maphash.Seed
	slots []int32 // open addressing: position+1 of an entry, 0 for none
	// free is set by New and Clone until the tree becomes a child.
	free bool
	// shared is set when SetTree was given a tree that was not free.
	shared bool
}

// entry is a key and its child. Most children of a transfer file are
// empty or a value (one key with an empty child), so these are kept
// without a tree: sub nil and val "" is an empty child, sub nil and val
// not "" the value val. The tree is made when someone asks for it (child),
// once, atomically, so that concurrent readers see the same tree; from
// then on sub is the child and val is ignored.
type entry struct {
	key string
	val string
	sub unsafe.Pointer // *Tree
}

// peek returns the child of e if it is a tree, nil if it is kept without.
func (e *entry) peek() *Tree { return (*Tree)(atomic.LoadPointer(&e.sub)) }

// child returns the child of e, making its tree if it has none yet.
func (e *entry) child() *Tree {
	if p := atomic.LoadPointer(&e.sub); p != nil {
		return (*Tree)(p)
	}
	t := &Tree{}
	if e.val != "" {
		t.entries = []entry{{key: e.val}}
	}
	atomic.CompareAndSwapPointer(&e.sub, nil, unsafe.Pointer(t))
	return (*Tree)(atomic.LoadPointer(&e.sub))
}

// first returns the number of keys of e's child and its first key.
func (e *entry) first() (n int, key string) {
	if sub := e.peek(); sub != nil {
		if len(sub.entries) == 0 {
			return 0, ""
		}
		return len(sub.entries), sub.entries[0].key
	}
	if e.val != "" {
		return 1, e.val
	}
	return 0, ""
}

// sameChild reports whether a and b have equal children.
func sameChild(a, b *entry) bool {
	sa, sb := a.peek(), b.peek()
	switch {
	case sa == nil && sb == nil:
		return a.val == b.val
	case sa == nil:
		sa, b = sb, a
	case sb != nil:
		return sa.Equal(sb)
	}
	// sa is a tree, b has none.
	if b.val == "" {
		return sa.Len() == 0
	}
	return sa.Len() == 1 && sa.entries[0].key == b.val && sameChild(&sa.entries[0], &entry{})
}

// isShared reports whether t was given to SetTree when it was not free.
func (t *Tree) isShared() bool { return t != nil && t.x != nil && t.x.shared }

// New returns an empty tree.
func New() *Tree { return &Tree{x: &extra{free: true}} }

// Len returns the number of keys at the top level of t.
func (t *Tree) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Keys returns the top-level keys of t in order.
func (t *Tree) Keys() []string {
	if t == nil {
		return nil
	}
	keys := make([]string, len(t.entries))
	for i := range t.entries {
		keys[i] = t.entries[i].key
	}
	return keys
}

// All iterates over the top-level keys of t and their children, in order.
// The tree must not be modified during the iteration.
func (t *Tree) All() iter.Seq2[string, *Tree] {
	return func(yield func(string, *Tree) bool) {
		if t == nil {
			return
		}
		for i := range t.entries {
			e := &t.entries[i]
			if !yield(e.key, e.child()) {
				return
			}
		}
	}
}

func (t *Tree) find(key string) int {
	if t == nil {
		return -1
	}
	if t.x != nil && t.x.slots != nil {
		return t.x.lookup(t.entries, key)
	}
	for i := range t.entries {
		if t.entries[i].key == key {
			return i
		}
	}
	return -1
}

// lookup returns the position of key in entries, -1 if absent.
func (x *extra) lookup(entries []entry, key string) int {
	mask := uint64(len(x.slots) - 1)
	for i := maphash.String(x.seed, key) & mask; ; i = (i + 1) & mask {
		p := x.slots[i]
		if p == 0 {
			return -1
		}
		if entries[p-1].key == key {
			return int(p - 1)
		}
	}
}

// addNew records that entries[pos] will hold key, unless an entry before
// it holds key already; the table must have room.
func (x *extra) addNew(entries []entry, key string, pos int) bool {
	mask := uint64(len(x.slots) - 1)
	for i := maphash.String(x.seed, key) & mask; ; i = (i + 1) & mask {
		p := x.slots[i]
		if p == 0 {
			x.slots[i] = int32(pos + 1)
			return true
		}
		if entries[p-1].key == key {
			return false
		}
	}
}

// add records that entries[pos] holds key; the table must have room.
func (x *extra) add(key string, pos int) {
	mask := uint64(len(x.slots) - 1)
	i := maphash.String(x.seed, key) & mask
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = int32(pos + 1)
}

// slotsFor returns the table size for n keys: at most half full.
func slotsFor(n int) int {
	size := 64
	for size < 2*n {
		size *= 2
	}
	return size
}

// Get returns the child of key, or nil if t has no such key.
func (t *Tree) Get(key string) *Tree {
	if i := t.find(key); i >= 0 {
		return t.entries[i].child()
	}
	return nil
}

// Has reports whether t holds key at its top level.
func (t *Tree) Has(key string) bool { return t.find(key) >= 0 }

// Lookup follows a path of keys from t and returns the tree at its end, or
// nil if any key along the path is missing.
func (t *Tree) Lookup(path ...string) *Tree {
	for _, k := range path {
		t = t.Get(k)
		if t == nil {
			return nil
		}
	}
	return t
}

// Set returns the child of key, adding key with an empty child at the end of
// t if it is not there yet.
func (t *Tree) Set(key string) *Tree {
	if i := t.find(key); i >= 0 {
		return t.entries[i].child()
	}
	sub := &Tree{}
	t.insert(key, sub)
	return sub
}

// SetTree makes sub the child of key, keeping key's position if present.
func (t *Tree) SetTree(key string, sub *Tree) {
	switch {
	case sub == nil:
		sub = &Tree{}
	case sub.x != nil && sub.x.free:
		sub.x.free = false
		if sub.x.slots == nil && !sub.x.shared {
			sub.x = nil
		}
	default:
		// It may be the child of another key as well.
		if sub.x == nil {
			sub.x = &extra{}
		}
		sub.x.shared = true
	}
	t.setTree(key, sub)
}

// setTree is SetTree for a sub known to be the child of no other key.
func (t *Tree) setTree(key string, sub *Tree) {
	if i := t.find(key); i >= 0 {
		t.entries[i].sub, t.entries[i].val = unsafe.Pointer(sub), ""
		return
	}
	t.insert(key, sub)
}

func (t *Tree) insert(key string, sub *Tree) {
	t.entries = append(t.entries, entry{key: key, sub: unsafe.Pointer(sub)})
	switch {
	case t.x != nil && t.x.slots != nil && 2*len(t.entries) <= len(t.x.slots):
		t.x.add(key, len(t.entries)-1)
	case len(t.entries) > indexThreshold:
		t.reindex()
	}
}

// reindex rebuilds the index of t, or drops it when t is small.
func (t *Tree) reindex() {
	if len(t.entries) <= indexThreshold {
		if t.x != nil {
			t.x.slots = nil
			if !t.x.free && !t.x.shared {
				t.x = nil
			}
		}
		return
	}
	if t.x == nil {
		t.x = &extra{}
	}
	if t.x.slots == nil {
		t.x.seed = maphash.MakeSeed()
	}
	t.x.slots = make([]int32, slotsFor(2*len(t.entries)))
	for i := range t.entries {
		t.x.add(t.entries[i].key, i)
	}
}

// Unset removes key and its child from t, reporting whether it was there.
func (t *Tree) Unset(key string) bool {
	i := t.find(key)
	if i < 0 {
		return false
	}
	t.entries = append(t.entries[:i], t.entries[i+1:]...)
	t.entries[len(t.entries) : len(t.entries)+1][0] = entry{} // let the child go
	if t.x != nil && t.x.slots != nil {
		t.reindex()
	}
	return true
}

// Value returns the value stored under key: the single key of key's child.
// It reports false if key is missing or its child does not hold exactly one key.
func (t *Tree) Value(key string) (string, bool) {
	i := t.find(key)
	if i < 0 {
		return "", false
	}
	n, v := t.entries[i].first()
	return v, n == 1
}

// SetValue stores value under key, replacing whatever key held, in the way
// KVTree's kvtree_util_set_* functions do.
func (t *Tree) SetValue(key, value string) {
	if value == "" {
		t.setTree(key, &Tree{entries: []entry{{}}})
		return
	}
	if i := t.find(key); i >= 0 {
		t.entries[i] = entry{key: key, val: value}
		return
	}
	t.insert(key, nil)
	t.entries[len(t.entries)-1].val = value
}

// Uint returns the value under key parsed as an unsigned decimal byte count.
// ok is false if key is absent; err describes a present but malformed value.
func (t *Tree) Uint(key string) (v uint64, ok bool, err error) {
	s, ok, err := t.single(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %q is not an unsigned decimal number", key, s)
	}
	return v, true, nil
}

// single returns the one value under key; ok is false if key is absent, err
// non-nil if key is present without exactly one value.
func (t *Tree) single(key string) (s string, ok bool, err error) {
	i := t.find(key)
	if i < 0 {
		return "", false, nil
	}
	n, v := t.entries[i].first()
	if n != 1 {
		return "", true, fmt.Errorf("%s: want one value, found %d", key, n)
	}
	return v, true, nil
}

// SetUint stores v under key as an unsigned decimal, as KVTree's
// kvtree_util_set_bytecount does.
func (t *Tree) SetUint(key string, v uint64) { t.SetValue(key, strconv.FormatUint(v, 10)) }

// Float returns the value under key parsed as a decimal floating-point number.
// ok is false if key is absent; err describes a present but malformed value.
func (t *Tree) Float(key string) (v float64, ok bool, err error) {
	s, ok, err := t.single(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	v, err = strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %q is not a number", key, s)
	}
	return v, true, nil
}

// SetFloat stores v under key in C's "%f" form (52428800.000000), as
// KVTree's kvtree_util_set_double does.
func (t *Tree) SetFloat(key string, v float64) { t.SetValue(key, strconv.FormatFloat(v, 'f', 6, 64)) }

// CRC returns the value under key parsed as a CRC32 in "%#x" form.
func (t *Tree) CRC(key string) (v uint32, ok bool, err error) {
	s, ok, err := t.single(key)
	if !ok || err != nil {
		return 0, ok, err
	}
	u, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, true, fmt.Errorf("%s: %q is not a 32-bit CRC", key, s)
	}
	return uint32(u), true, nil
}

// SetCRC stores a CRC32 under key in C's "%#x" form (0x1a2b3c4d; 0 for zero),
// as KVTree's kvtree_util_set_crc32 does.
func (t *Tree) SetCRC(key string, v uint32) { t.SetValue(key, FormatCRC(v)) }

// FormatCRC formats v like C's "%#x": "0" for zero, "0x…" otherwise.
func FormatCRC(v uint32) string {
	if v == 0 {
		return "0"
	}
	return "0x" + strconv.FormatUint(uint64(v), 16)
}

// Walk calls fn for every tree below t, depth first in order, with the path of
// keys leading to it. Returning an error from fn stops the walk.
func (t *Tree) Walk(fn func(path []string, sub *Tree) error) error {
	return t.walk(nil, fn)
}

func (t *Tree) walk(path []string, fn func([]string, *Tree) error) error {
	for i := range t.Len() {
		e := &t.entries[i]
		p := append(path[:len(path):len(path)], e.key)
		sub := e.child()
		if err := fn(p, sub); err != nil {
			return err
		}
		if err := sub.walk(p, fn); err != nil {
			return err
		}
	}
	return nil
}

// Clone returns a deep copy of t.
func (t *Tree) Clone() *Tree {
	c := New()
	c.entries = t.cloneEntries()
	c.reindex()
	return c
}

func (t *Tree) cloneEntries() []entry {
	if t.Len() == 0 {
		return nil
	}
	entries := make([]entry, len(t.entries))
	for i := range t.entries {
		e := &t.entries[i]
		entries[i].key = e.key
		switch sub := e.peek(); {
		case sub == nil:
			entries[i].val = e.val
		case sub.Len() > 0:
			c := &Tree{entries: sub.cloneEntries()}
			c.reindex()
			entries[i].sub = unsafe.Pointer(c)
		}
	}
	return entries
}

// Equal reports whether t and u hold the same keys in the same order with
// equal children.
func (t *Tree) Equal(u *Tree) bool {
	if t.Len() != u.Len() {
		return false
	}
	for i := range t.Len() {
		a, b := &t.entries[i], &u.entries[i]
		if a.key != b.key || !sameChild(a, b) {
			return false
		}
	}
	return true
}
