// Package hashfile reads and writes kvtree hash files, the binary format SCR's
// library and its flush daemon use for the transfer file, byte for byte as the
// KVTree C library does, and shares them between processes with KVTree's
// locking discipline (lock, read, modify, rewrite in place, fsync, unlock).
package hashfile

import (
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync/atomic"
)

// indexThreshold is the number of keys above which a Tree keeps a map from
// key to position, so that lookups in a FILES subtree of thousands of
// entries stay O(1) while small trees stay small.
const indexThreshold = 16

// Tree is a kvtree: an ordered set of unique keys, each with a child tree.
// A value is stored as a key whose child holds exactly one key with an empty
// child, as KVTree does (SIZE → 524294 → {}). The order of keys is the order
// they were read or added in; it carries no meaning in the protocol but is
// preserved so that decoding and re-encoding a file keeps its bytes.
//
// Every key has a child tree of its own, never the child of another key.
// A Tree may be read from several goroutines at once; a change must not
// overlap any other use.
type Tree struct {
	entries []entry
	index   map[string]int // key → position in entries; nil at indexThreshold keys or fewer
}

// entry is a key and its child. Most children of a transfer file are
// empty or a value, so those are kept without a tree until someone asks
// for it: sub nil and val "" is an empty child, sub nil and val not "" the
// value val: a tree for each (two trees and an entry per value) took the
// daemon past its memory goal at 100,000 entries. The tree is made once,
// atomically, so that concurrent readers see the same one; from then on
// sub is the child and val is ignored.
type entry struct {
	key string
	val string
	sub atomic.Pointer[Tree]
}

// peek returns the child of e if it is a tree, nil if it is kept without.
func (e *entry) peek() *Tree { return e.sub.Load() }

// child returns the child of e, making its tree if it has none yet.
func (e *entry) child() *Tree {
	if t := e.sub.Load(); t != nil {
		return t
	}
	t := &Tree{}
	if e.val != "" {
		t.entries = []entry{{key: e.val}}
	}
	e.sub.CompareAndSwap(nil, t)
	return e.sub.Load()
}

// first returns the number of keys of e's child and its first key.
func (e *entry) first() (n int, key string) {
	if sub := e.peek(); sub != nil {
		if sub.Len() == 0 {
			return 0, ""
		}
		return sub.Len(), sub.entries[0].key
	}
	if e.val != "" {
		return 1, e.val
	}
	return 0, ""
}

// New returns an empty tree.
func New() *Tree { return &Tree{} }

// Len returns the number of keys at the top level of t.
func (t *Tree) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Keys returns the top-level keys of t in order.
func (t *Tree) Keys() []string {
	keys := make([]string, 0, t.Len())
	for k := range t.All() {
		keys = append(keys, k)
	}
	return keys
}

// All iterates over the top-level keys of t and their children, in order.
// The tree must not be modified during the iteration.
func (t *Tree) All() iter.Seq2[string, *Tree] {
	return func(yield func(string, *Tree) bool) {
		for i := range t.Len() {
			if !yield(t.entries[i].key, t.entries[i].child()) {
				return
			}
		}
	}
}

// find returns the position of key in t, -1 if absent.
func (t *Tree) find(key string) int {
	if t == nil {
		return -1
	}
	if t.index != nil {
		if i, ok := t.index[key]; ok {
			return i
		}
		return -1
	}
	for i := range t.entries {
		if t.entries[i].key == key {
			return i
		}
	}
	return -1
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
	t.put(key, sub)
	return sub
}

// SetTree makes a copy of sub the child of key, keeping key's position if
// present. A copy, so that no tree is ever the child of two keys: an image
// holds each child once, and a tree read back from it must be the tree
// that was written.
func (t *Tree) SetTree(key string, sub *Tree) { t.put(key, sub.Clone()) }

// put makes sub the child of key, keeping key's position if present.
func (t *Tree) put(key string, sub *Tree) {
	t.at(key).sub.Store(sub)
}

// at returns the entry of key with its child emptied, keeping its
// position; a key not there yet is added at the end of t.
func (t *Tree) at(key string) *entry {
	if i := t.find(key); i >= 0 {
		e := &t.entries[i]
		e.val = ""
		e.sub.Store(nil)
		return e
	}
	t.entries = append(t.entries, entry{key: key})
	switch {
	case t.index != nil:
		t.index[key] = len(t.entries) - 1
	case len(t.entries) > indexThreshold:
		t.reindex()
	}
	return &t.entries[len(t.entries)-1]
}

// reindex rebuilds the index of t, or drops it when t is small.
func (t *Tree) reindex() {
	if len(t.entries) <= indexThreshold {
		t.index = nil
		return
	}
	t.index = make(map[string]int, len(t.entries))
	for i := range t.entries {
		t.index[t.entries[i].key] = i
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
	if t.index != nil {
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
	if value == "" { // an empty key: a tree, as val "" is an empty child
		t.put(key, &Tree{entries: []entry{{}}})
		return
	}
	t.at(key).val = value
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
	for k, sub := range t.All() {
		p := append(path[:len(path):len(path)], k)
		if err := fn(p, sub); err != nil {
			return err
		}
		if err := sub.walk(p, fn); err != nil {
			return err
		}
	}
	return nil
}

// Clone returns a deep copy of t; a nil t gives an empty tree.
func (t *Tree) Clone() *Tree {
	c := &Tree{}
	if t.Len() == 0 {
		return c
	}
	c.entries = make([]entry, len(t.entries))
	for i := range t.entries {
		e, ce := &t.entries[i], &c.entries[i]
		ce.key = e.key
		if sub := e.peek(); sub != nil {
			ce.sub.Store(sub.Clone())
		} else {
			ce.val = e.val
		}
	}
	c.reindex()
	return c
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

// sameChild reports whether a and b have equal children.
func sameChild(a, b *entry) bool {
	na, ka := a.first()
	nb, kb := b.first()
	if na != nb || ka != kb {
		return false
	}
	sa, sb := a.peek(), b.peek()
	if sa == nil && sb == nil {
		return true // both empty, or both the same value
	}
	if sa == nil {
		sa, sb = sb, sa
	}
	if sb == nil { // b is empty or a value: a's first key, if any, has an empty child
		return na == 0 || sa.entries[0].peek().Len() == 0 && sa.entries[0].val == ""
	}
	return sa.Equal(sb)
}
