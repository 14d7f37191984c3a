package hashfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"testing"
)

// TestEmptyChildIsAReadWriteTree: an empty child of a decoded tree (a
// value's own child too) is a tree like any other: the same one each time,
// and what is added to it is in the tree and its image.
func TestEmptyChildIsAReadWriteTree(t *testing.T) {
	src := New()
	src.Set("FILES").Set("/cache/a") // an entry with nothing under it
	src.SetValue("STATE", "RUNNING")
	tr, err := Decode(Encode(src))
	if err != nil {
		t.Fatal(err)
	}
	e := tr.Lookup("FILES", "/cache/a")
	if e == nil || e.Len() != 0 {
		t.Fatalf("empty entry: %v", e)
	}
	if tr.Lookup("FILES", "/cache/a") != e {
		t.Fatal("an empty child is a different tree each time it is asked for")
	}
	e.SetValue("ERROR", "no DESTINATION")
	leaf := tr.Lookup("STATE", "RUNNING")
	leaf.Set("X")
	back, err := Decode(Encode(tr))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := back.Lookup("FILES", "/cache/a").Value("ERROR"); v != "no DESTINATION" {
		t.Fatalf("a value set in an empty child was lost: %q", v)
	}
	if back.Lookup("STATE", "RUNNING", "X") == nil {
		t.Fatal("a key added under a value was lost")
	}
	if other := back.Lookup("FILES"); other.Len() != 1 {
		t.Fatalf("FILES holds %d keys", other.Len())
	}
}

// TestEmptyChildConcurrentReaders: readers asking for the same empty child
// at once all get one tree, and reading changes nothing (run with -race).
func TestEmptyChildConcurrentReaders(t *testing.T) {
	tr, err := Decode(Encode(transferTree(50)))
	if err != nil {
		t.Fatal(err)
	}
	key := "/tmp/user1/scr.1001186/index.0/dataset.1/rank_7.ckpt"
	const readers = 8
	got := make([]*Tree, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = tr.Lookup("FILES", key, "WRITTEN", "0")
			_ = tr.Walk(func([]string, *Tree) error { return nil })
			_ = Encode(tr)
		}()
	}
	wg.Wait()
	for i := range got {
		if got[i] == nil || got[i] != got[0] {
			t.Fatalf("reader %d got %p, reader 0 %p", i, got[i], got[0])
		}
	}
}

// TestLargeTreeIndex: a tree above the index threshold finds, adds,
// removes and re-adds keys as a small one does, and its decoder refuses a
// duplicate key.
func TestLargeTreeIndex(t *testing.T) {
	tr := New()
	const n = 1000
	for i := range n {
		tr.SetUint(fmt.Sprint("k", i), uint64(i))
	}
	for i := 0; i < n; i += 3 {
		if !tr.Unset(fmt.Sprint("k", i)) {
			t.Fatalf("k%d not removed", i)
		}
	}
	tr.SetUint("k0", 7)
	for i := range n {
		v, ok, _ := tr.Uint(fmt.Sprint("k", i))
		switch {
		case i == 0:
			if !ok || v != 7 {
				t.Fatalf("k0 = %d, %v", v, ok)
			}
		case i%3 == 0:
			if ok {
				t.Fatalf("k%d still there", i)
			}
		case !ok || v != uint64(i):
			t.Fatalf("k%d = %d, %v", i, v, ok)
		}
	}
	if tr.Keys()[len(tr.Keys())-1] != "k0" {
		t.Fatal("a re-added key is not at the end")
	}
	back, err := Decode(Encode(tr))
	if err != nil || !back.Equal(tr) || back.Clone().Get("k5") == nil {
		t.Fatalf("round trip: %v", err)
	}
	// The last key renamed to the first one's name: a duplicate.
	dup := New()
	for i := range n {
		dup.Set(fmt.Sprint("d", i))
	}
	dup.Set("zz")
	img := Encode(dup)
	copy(img[len(img)-4-4-3:], "d0\x00")
	binary.BigEndian.PutUint32(img[len(img)-4:], crc32.ChecksumIEEE(img[:len(img)-4]))
	if _, err := Decode(img); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `duplicate key "d0"`) {
		t.Fatalf("duplicate key in a large tree: %v", err)
	}
}

// TestSetTreePlacesACopy: a tree placed under two keys is two trees, as
// its image reads back: a change through one key leaves the other as it
// was, and so does a later change of the tree given.
func TestSetTreePlacesACopy(t *testing.T) {
	e := New()
	e.SetUint("WRITTEN", 0)
	tr := New()
	tr.SetTree("A", e)
	tr.SetTree("B", tr.Get("A"))
	tr.Get("A").SetUint("WRITTEN", 5)
	e.SetUint("WRITTEN", 7)
	for _, tc := range []struct {
		key  string
		want uint64
	}{{"A", 5}, {"B", 0}} {
		if got, _, _ := tr.Get(tc.key).Uint("WRITTEN"); got != tc.want {
			t.Fatalf("%s WRITTEN = %d, want %d", tc.key, got, tc.want)
		}
	}
	back, err := Decode(Encode(tr))
	if err != nil || !back.Equal(tr) {
		t.Fatalf("the image reads back otherwise: %v", err)
	}
}
