package hashfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// errEdit is what a failing edit returns, after changing the tree.
var errEdit = errors.New("edit refused")

// edit returns a deterministic change of a transfer tree chosen by op and
// arg, so that the same change can be applied to the Store's tree and to a
// fresh decode of the file. Some edits fail half-way, some give the tree a
// shape its image cannot reproduce (a NUL in a key, one subtree under two
// keys).
func edit(op, arg byte) func(*Tree) error {
	key := func(t *Tree) string {
		files := t.Get("FILES")
		if files.Len() == 0 {
			return "/cache/none"
		}
		return files.Keys()[int(arg)%files.Len()]
	}
	switch op % 10 {
	case 0: // a commit: WRITTEN raised
		return func(t *Tree) error {
			e := t.Set("FILES").Set(key(t))
			w, _, _ := e.Uint("WRITTEN")
			e.SetUint("WRITTEN", w+uint64(arg)+1)
			return nil
		}
	case 1: // a new entry, as transfer.AddFile makes it
		return func(t *Tree) error {
			e := New()
			e.SetValue("DESTINATION", fmt.Sprintf("/pfs/new_%d", arg))
			e.SetUint("SIZE", uint64(arg)*1000)
			e.SetUint("WRITTEN", 0)
			t.Set("FILES").SetTree(fmt.Sprintf("/cache/new_%d", arg), e)
			return nil
		}
	case 2: // an entry removed
		return func(t *Tree) error {
			t.Set("FILES").Unset(key(t))
			return nil
		}
	case 3: // a change, then a failure: nothing may be written or kept
		return func(t *Tree) error {
			t.SetValue("STATE", "CHANGED_THEN_FAILED")
			t.Get("FILES").Unset(key(t))
			return errEdit
		}
	case 4: // no change at all
		return func(*Tree) error { return nil }
	case 5: // a change undone: the image stays the same
		return func(t *Tree) error {
			old, _ := t.Value("STATE")
			t.SetValue("STATE", "TRANSIENT")
			if old == "" {
				t.Unset("STATE")
			} else {
				t.SetValue("STATE", old)
			}
			return nil
		}
	case 6: // one subtree under two keys
		return func(t *Tree) error {
			if e := t.Lookup("FILES", key(t)); e != nil {
				t.SetTree(fmt.Sprintf("ALIAS_%d", arg%3), e)
			}
			return nil
		}
	case 7: // a change through the tree shared by two keys, if any
		return func(t *Tree) error {
			if a := t.Get(fmt.Sprintf("ALIAS_%d", arg%3)); a != nil {
				a.SetUint("WRITTEN", uint64(arg))
			}
			return nil
		}
	case 8: // a key holding a NUL byte: its image reads back otherwise
		return func(t *Tree) error {
			t.Set("NUL").SetValue(fmt.Sprintf("k\x00%d", arg%4), "v")
			return nil
		}
	default: // state and command, as both sides set them
		return func(t *Tree) error {
			t.SetValue("STATE", []string{"RUNNING", "STOPPED", "EXITING"}[arg%3])
			t.Unset("NUL")
			return nil
		}
	}
}

// storeProgram runs a program of operations against one Store (s) on path
// while other writers change the file, and checks after each update of s
// that it wrote exactly what a fresh decode of the file, the same edit and
// an encode give, and that Changed (every version seen) tells whether the file holds what s
// last read or wrote.
type storeProgram struct {
	t     testing.TB
	path  string
	s     *Store // the Store under test, with its cache
	other *Store // a second Store on the same file: another process's view
	last  []byte // the image s last read or wrote; nil if none
}

func newStoreProgram(t testing.TB, locking Locking) *storeProgram {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	base := transferTree(5)
	base.SetValue("STATE", "RUNNING")
	if err := os.WriteFile(path, Encode(base), 0o600); err != nil {
		t.Fatal(err)
	}
	return &storeProgram{t: t, path: path, s: NewStore(path, locking), other: NewStore(path, locking)}
}

func (p *storeProgram) file() []byte {
	b, err := os.ReadFile(p.path)
	if err != nil {
		p.t.Fatal(err)
	}
	return b
}

// update applies edit(op, arg) through s and checks the outcome against a
// fresh decode of what the file held.
func (p *storeProgram) update(step int, op, arg byte) {
	before := p.file()
	var want []byte
	wantErr := false
	fresh, err := Decode(before)
	switch {
	case err != nil:
		wantErr = true
	case edit(op, arg)(fresh) != nil:
		wantErr = true
	default:
		want = Encode(fresh)
	}
	tree, wrote, err := p.s.Update(edit(op, arg))
	after := p.file()
	if wantErr {
		if err == nil {
			p.t.Fatalf("step %d (op %d): the update succeeded, a fresh decode and edit fail", step, op%10)
		}
		if !bytes.Equal(after, before) {
			p.t.Fatalf("step %d (op %d): a failed update changed the file", step, op%10)
		}
		p.last = nil // the edit may have changed the tree: none is kept
		return
	}
	if err != nil {
		p.t.Fatalf("step %d (op %d): %v", step, op%10, err)
	}
	if !bytes.Equal(after, want) {
		p.t.Fatalf("step %d (op %d): the update wrote %d bytes unlike the %d a fresh decode, edit and encode give", step, op%10, len(after), len(want))
	}
	if wrote != !bytes.Equal(want, before) {
		p.t.Fatalf("step %d (op %d): wrote=%v, but the image changed: %v", step, op%10, wrote, !bytes.Equal(want, before))
	}
	if !bytes.Equal(Encode(tree), want) {
		p.t.Fatalf("step %d (op %d): the returned tree is not what was written", step, op%10)
	}
	p.last = nil
	if _, _, exact := overwriteImage(nil, fresh); exact {
		p.last = want // kept, unless the image decodes to another tree
	}
}

// foreign changes the file behind s's back: through the other Store, or
// by a raw write of other bytes of the same length with the same mtime.
func (p *storeProgram) foreign(step int, op, arg byte) {
	if op%2 == 0 {
		if _, _, err := p.other.Update(edit(op/2, arg)); err != nil && !errors.Is(err, errEdit) && !errors.Is(err, ErrFormat) {
			p.t.Fatalf("step %d: other store: %v", step, err)
		}
		return
	}
	fi, err := os.Stat(p.path)
	if err != nil {
		p.t.Fatal(err)
	}
	old := p.file()
	img := sameLengthVariant(old, arg)
	if img == nil {
		return
	}
	f, err := os.OpenFile(p.path, os.O_WRONLY, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := f.WriteAt(img, 0); err != nil {
		p.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Chtimes(p.path, fi.ModTime(), fi.ModTime()); err != nil {
		p.t.Fatal(err)
	}
	if fi2, err := os.Stat(p.path); err != nil || fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		p.t.Fatalf("step %d: the raw write changed size or mtime: %v", step, err)
	}
}

// sameLengthVariant returns a valid image as long as img, differing in one
// digit of a WRITTEN value, or nil if img has none (or does not decode).
func sameLengthVariant(img []byte, arg byte) []byte {
	t, err := Decode(img)
	if err != nil {
		return nil
	}
	files := t.Get("FILES")
	for i := range files.Len() {
		e := files.Get(files.Keys()[(i+int(arg))%files.Len()])
		w, ok := e.Value("WRITTEN")
		if !ok || w == "" {
			continue
		}
		d := []byte(w)
		d[len(d)-1] = '0' + (d[len(d)-1]-'0'+1)%10
		e.SetValue("WRITTEN", string(d))
		return Encode(t)
	}
	return nil
}

func (p *storeProgram) checkUnchanged(step int) {
	want := p.last != nil && bytes.Equal(p.file(), p.last)
	if got := holdsOwn(p.s); got != want {
		p.t.Fatalf("step %d: holdsOwn = %v, want %v", step, got, want)
	}
}

// run interprets prog two bytes at a time: an operation and its argument.
func (p *storeProgram) run(prog []byte) {
	for i := 0; i+1 < len(prog); i += 2 {
		op, arg := prog[i], prog[i+1]
		switch {
		case op < 160:
			p.update(i/2, op, arg)
		case op < 240:
			p.foreign(i/2, op-160, arg)
		default:
			_, err := p.s.Read()
			switch {
			case err == nil:
				p.last = p.file()
			case errors.Is(err, ErrFormat):
				p.last = nil // an image that does not decode is not kept
			default:
				p.t.Fatalf("step %d: read: %v", i/2, err)
			}
		}
		if testing.Verbose() {
			p.t.Logf("step %d: op %d arg %d", i/2, op, arg)
		}
		p.checkUnchanged(i / 2)
	}
}

// TestStoreCachedUpdateMatchesFresh: whatever happened to the file since,
// an update through a Store that keeps its last tree writes exactly the
// bytes a fresh decode, the same edit and an encode would.
func TestStoreCachedUpdateMatchesFresh(t *testing.T) {
	for _, locking := range []Locking{Flock, Fcntl} {
		t.Run(locking.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(locking)))
			for trial := range 20 {
				prog := make([]byte, 2*40)
				for i := range prog {
					prog[i] = byte(r.UintN(256))
				}
				t.Run(strconv.Itoa(trial), func(t *testing.T) { newStoreProgram(t, locking).run(prog) })
			}
		})
	}
}

// TestStoreCacheSeesSameSizeSameMtimeChange: a change by someone else that
// keeps the file's size and mtime is seen by the next update.
func TestStoreCacheSeesSameSizeSameMtimeChange(t *testing.T) {
	p := newStoreProgram(t, Flock)
	p.run([]byte{
		4, 0, // read and cache
		0, 1, // commit: WRITTEN of an entry raised, through the cache
		161, 3, // raw write: another WRITTEN digit, same length, same mtime
		0, 2, // commit through s: must start from the raw write's tree
		160, 0, // the other Store commits
		0, 1, // and s sees it
	})
}

// TestStoreUpdateReusesTree: an update of a file that holds exactly what
// the Store last wrote starts from the tree it left (no decode); a change
// by another Store makes it decode again.
func TestStoreUpdateReusesTree(t *testing.T) {
	p := newStoreProgram(t, Flock)
	t1, _, err := p.s.Update(edit(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	t2, _, err := p.s.Update(edit(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	if t1 != t2 {
		t.Fatal("the second update decoded the file again instead of reusing the tree it wrote")
	}
	if _, _, err := p.other.Update(edit(0, 3)); err != nil {
		t.Fatal(err)
	}
	t3, _, err := p.s.Update(edit(4, 0))
	if err != nil {
		t.Fatal(err)
	}
	if t3 == t2 {
		t.Fatal("the tree was reused after another Store changed the file")
	}
	if !bytes.Equal(Encode(t3), p.file()) {
		t.Fatal("the tree does not hold the other Store's change")
	}
	// A read hands out a tree of its own, which the caller may change.
	r, err := p.s.Read()
	if err != nil {
		t.Fatal(err)
	}
	r.SetValue("STATE", "MINE")
	t4, _, err := p.s.Update(edit(4, 0))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := t4.Value("STATE"); v == "MINE" || !bytes.Equal(Encode(t4), p.file()) {
		t.Fatal("a change to a tree Read returned reached the Store's tree")
	}
}

func FuzzStoreUpdate(f *testing.F) {
	f.Add([]byte{4, 0, 0, 1, 161, 3, 0, 2})
	f.Add([]byte{1, 5, 6, 0, 7, 0, 0, 0, 8, 1, 0, 0, 9, 0, 0, 0})
	f.Add([]byte{3, 0, 0, 1, 160, 2, 0, 1, 250, 0, 2, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 64 {
			prog = prog[:64]
		}
		newStoreProgram(t, Flock).run(prog)
	})
}

// TestChangedConcurrentWriter: another process rewrites the file under
// its lock while this one updates it and asks Changed. Once the file was
// seen (under the lock) to hold a later count of the other writer than the
// Store's image holds, Changed must say true: the other writer's count
// only grows, so the file can never again hold that image. With the writer
// gone, Changed is false right after the Store's own update and true
// after a foreign one.
func TestChangedConcurrentWriter(t *testing.T) {
	const n = 300
	for _, locking := range []Locking{Flock, Fcntl} {
		t.Run(locking.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "transfer.scrinfo")
			s := NewStore(path, locking)
			if holdsOwn(s) {
				t.Fatal("the file holds the Store's image: true before anything was read")
			}
			if _, _, err := s.Update(func(tr *Tree) error { tr.SetUint("COUNT", 0); return nil }); err != nil {
				t.Fatal(err)
			}
			if !holdsOwn(s) {
				t.Fatal("the file holds the Store's image: false right after the Store's own write")
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=1", childPathEnv+"="+path,
				childLockEnv+"="+locking.String(), childNEnv+"="+strconv.Itoa(n))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			observer := NewStore(path, locking)
			falses := 0
		loop:
			for {
				var mine uint64
				tr, _, err := s.Update(func(tr *Tree) error {
					w, _, err := tr.Set("BY").Uint("parent")
					tr.Get("BY").SetUint("parent", w+1)
					mine, _, _ = tr.Get("BY").Uint("child")
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				_ = tr
				// Wait until the other writer has gone past the Store's
				// image, or has finished.
				for {
					seen, err := observer.Read()
					if err != nil {
						t.Fatal(err)
					}
					if c, _, _ := seen.Get("BY").Uint("child"); c > mine {
						break
					}
					select {
					case err := <-done:
						done <- err
						break loop
					case <-time.After(time.Millisecond):
					}
				}
				if holdsOwn(s) {
					t.Fatal("the file holds the Store's image: true although the other process has written since")
				}
				falses++
			}
			if err := <-done; err != nil {
				t.Fatalf("child: %v: %s", err, stderr.String())
			}
			if falses == 0 {
				t.Fatal("the other writer's changes were never observed")
			}
			if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue("STATE", "LAST"); return nil }); err != nil {
				t.Fatal(err)
			}
			if !holdsOwn(s) {
				t.Fatal("the file holds the Store's image: false after the Store's own write, the other writer gone")
			}
			if err := increment(observer, "child", 1); err != nil {
				t.Fatal(err)
			}
			if holdsOwn(s) {
				t.Fatal("the file holds the Store's image: true after another Store's write")
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if holdsOwn(s) {
				t.Fatal("the file holds the Store's image: true for a missing file")
			}
		})
	}
}

// TestOverwriteImage: encoded over an older image in the same buffer, a
// tree's image is exactly its encoding, and the offset returned is where
// the two images first differ, so that a rewrite may start there.
func TestOverwriteImage(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		a := randomTree(r, 0, false)
		b := a.Clone()
		switch trial % 4 {
		case 0: // a value changed somewhere
			_ = b.Walk(func(_ []string, sub *Tree) error {
				if sub.Len() == 1 && r.IntN(3) == 0 {
					sub.SetValue(sub.Keys()[0], fmt.Sprint("v", r.IntN(100)))
				}
				return nil
			})
		case 1: // another tree altogether
			b = randomTree(r, 0, false)
		case 2: // a key removed
			if b.Len() > 0 {
				b.Unset(b.Keys()[r.IntN(b.Len())])
			}
		case 3: // the same
		}
		old := Encode(a)
		buf := append(make([]byte, 0, len(old)+r.IntN(64)), old...)
		img, from, _ := overwriteImage(buf, b)
		want := Encode(b)
		if !bytes.Equal(img, want) {
			t.Fatalf("trial %d: the image encoded over another is not the tree's", trial)
		}
		first := 0
		for first < min(len(old), len(want)) && old[first] == want[first] {
			first++
		}
		if from != first {
			t.Fatalf("trial %d: first difference at %d, reported %d", trial, first, from)
		}
		if same := bytes.Equal(old, want); same != (from == len(img) && len(img) == len(old)) {
			t.Fatalf("trial %d: images equal %v, reported from %d of %d (old %d)", trial, same, from, len(img), len(old))
		}
	}
}

// TestMatchImage: a tree matches its own image, and no image with any one
// byte changed, cut or added.
func TestMatchImage(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 40 {
		tr := randomTree(r, 0, false)
		if trial%2 == 0 {
			tr, _ = Decode(Encode(tr)) // values kept as strings
		}
		img := Encode(tr)
		crc := binary.BigEndian.Uint32(img[len(img)-4:])
		if !matchImage(img, tr, crc) {
			t.Fatalf("trial %d: a tree does not match its own image", trial)
		}
		for i := range img {
			for _, bit := range []byte{1, 0x80} {
				img[i] ^= bit
				if matchImage(img, tr, crc) {
					t.Fatalf("trial %d: matched with byte %d of %d changed", trial, i, len(img))
				}
				img[i] ^= bit
			}
		}
		if matchImage(img[:len(img)-1], tr, crc) || matchImage(append(img[:len(img):len(img)], 0), tr, crc) {
			t.Fatalf("trial %d: matched an image cut or extended", trial)
		}
	}
}

// TestRewriteWritesOnlyChanges: whatever the old and new images, the file
// ends up holding exactly the new one, though only the bytes from the first
// difference on are written.
func TestRewriteWritesOnlyChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	path := filepath.Join(t.TempDir(), "img")
	for trial := range 300 {
		old := make([]byte, r.IntN(3*4096))
		for i := range old {
			old[i] = byte(r.UintN(4))
		}
		img := append([]byte(nil), old...)
		switch trial % 4 {
		case 0: // a few bytes changed
			for range 1 + r.IntN(3) {
				if len(img) > 0 {
					img[r.IntN(len(img))] ^= 1 + byte(r.UintN(3))
				}
			}
		case 1: // grown
			img = append(img, make([]byte, 1+r.IntN(4096))...)
		case 2: // shrunk
			img = img[:r.IntN(len(img)+1)]
		case 3: // cut in the middle
			if len(img) > 0 {
				i := r.IntN(len(img))
				img = append(img[:i:i], img[i+r.IntN(len(img)-i):]...)
			}
		}
		from := 0
		for from < min(len(img), len(old)) && img[from] == old[from] {
			from++
		}
		if err := os.WriteFile(path, old, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = rewrite(f, img, from, len(old), false)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, img) {
			t.Fatalf("trial %d: %d bytes over %d: the file holds %d bytes unlike the image", trial, len(img), len(old), len(got))
		}
	}
}

// TestChangedUntilSeen: a change someone else made keeps Changed true
// until Seen, even when it reaches the Store through an Update of its own
// that writes it back, after which the file holds the Store's image again.
// A watcher that skipped such a notification would miss the other
// writer's change.
func TestChangedUntilSeen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	ours, theirs := NewStore(path, Flock), NewStore(path, Flock)
	step := func(s *Store, key, value string) {
		t.Helper()
		if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue(key, value); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		what        string
		do          func()
		seen        bool // the watcher says it looked before Changed is asked
		wantChanged bool
	}{
		{"nothing read yet", func() {}, false, true},
		{"the Store's first update, its version not looked at", func() { step(ours, "STATE", "RUNNING") }, false, true},
		{"looked at", func() {}, true, false},
		{"the Store's own update", func() { step(ours, "BW", "1") }, false, false},
		{"another writer's change", func() { step(theirs, "COMMAND", "STOP") }, false, true},
		{"a commit reads that change and writes it back", func() { step(ours, "WRITTEN", "5") }, false, true},
		{"still not looked at", func() {}, false, true},
		{"looked at", func() {}, true, false},
		{"a read of the Store's own image", func() {
			if _, err := ours.Read(); err != nil {
				t.Fatal(err)
			}
		}, false, false},
		{"another writer's change, read", func() {
			step(theirs, "COMMAND", "RUN")
			if _, err := ours.Read(); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"the file removed, although looked at", func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, true, true},
	}
	for _, st := range steps {
		st.do()
		if st.seen {
			ours.Seen()
		}
		if got := ours.Changed(); got != st.wantChanged {
			t.Fatalf("%s: Changed() = %v, want %v", st.what, got, st.wantChanged)
		}
	}
}

// holdsOwn reports whether the file holds exactly the image s last read or
// wrote: Changed, every version read so far looked at.
func holdsOwn(s *Store) bool {
	s.Seen()
	return !s.Changed()
}

// TestChangedSizeFirst: a file whose size differs from the Store's image
// holds another image, and Changed says so without reading it: after a
// foreign write of a much larger image, the Store's buffer has not grown.
// A file of the same size is still read and compared.
func TestChangedSizeFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "transfer.scrinfo")
	s := NewStore(path, Flock)
	if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue("STATE", "STOPPED"); return nil }); err != nil {
		t.Fatal(err)
	}
	small := cap(s.buf)
	other := NewStore(path, Flock)
	if _, _, err := other.Update(func(tr *Tree) error {
		for i := range 20000 {
			tr.Set("FILES").Set(fmt.Sprintf("/cache/rank%06d.ckpt", i)).SetUint("SIZE", 1<<16)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if holdsOwn(s) {
		t.Fatal("the file holds the Store's image: true after another Store wrote a larger image")
	}
	if cap(s.buf) != small {
		t.Fatalf("the Store's buffer grew from %d to %d bytes: the larger file was read", small, cap(s.buf))
	}
	if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue("STATE", "RUNNING"); return nil }); err != nil {
		t.Fatal(err)
	}
	if !holdsOwn(s) {
		t.Fatal("the file holds the Store's image: false right after the Store's own write")
	}
	// Same size, other bytes: read and compared.
	if _, _, err := other.Update(func(tr *Tree) error { tr.SetValue("STATE", "RUNNINH"); return nil }); err != nil {
		t.Fatal(err)
	}
	if holdsOwn(s) {
		t.Fatal("the file holds the Store's image: true after another Store wrote an image of the same size")
	}
}
