package hashfile

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// journalFixture writes a hash file of n entries through a Store, then
// rewrites it with every WRITTEN grown by a digit (so the image changes
// from its header on), and returns the path, the old and new images, and
// the journal as the rewrite left it, its record set back to pending: the
// state a kill during the in-place write leaves.
func journalFixture(t *testing.T, n int) (path string, oldImg, newImg, jrnl []byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "transfer.scrinfo")
	s := NewStore(path, Flock)
	if _, _, err := s.Update(func(tr *Tree) error {
		for i := range n {
			e := tr.Set("FILES").Set("/cache/rank" + strconv.Itoa(i) + ".ckpt")
			e.SetValue("DESTINATION", "/pfs/ckpt/rank"+strconv.Itoa(i)+".ckpt")
			e.SetUint("SIZE", 1<<20)
			e.SetUint("WRITTEN", 0)
		}
		tr.SetValue("COMMAND", "RUN")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	oldImg = readFile(t, path)
	if _, _, err := s.Update(func(tr *Tree) error {
		for i := range n {
			tr.Lookup("FILES", "/cache/rank"+strconv.Itoa(i)+".ckpt").SetUint("WRITTEN", 65536)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	newImg = readFile(t, path)
	jrnl = readFile(t, JournalPath(path))
	if _, err := decodeJournal(jrnl); err != errJournalDone {
		t.Fatalf("after a whole rewrite the journal's record is not marked done: %v", err)
	}
	binary.BigEndian.PutUint32(jrnl[4:], journalPending)
	return path, oldImg, newImg, jrnl
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// torn returns the bytes a write of newImg over oldImg cut after k bytes
// leaves.
func torn(oldImg, newImg []byte, k int) []byte {
	b := append([]byte{}, newImg[:k]...)
	if k < len(oldImg) {
		b = append(b, oldImg[k:]...)
	}
	return b
}

// TestJournalCompletesATornRewrite: a rewrite cut at any page boundary
// leaves a file that does not decode; a reader completes it from the
// journal (in memory), and an update writes the completed image in place,
// exactly the new image, and marks the record applied.
func TestJournalCompletesATornRewrite(t *testing.T) {
	path, oldImg, newImg, jrnl := journalFixture(t, 1000)
	if len(newImg) < 4*journalPage {
		t.Fatalf("fixture of %d bytes, want several pages", len(newImg))
	}
	cuts := 0
	for k := journalPage; k < len(newImg); k += journalPage {
		b := torn(oldImg, newImg, k)
		if _, err := Decode(b); err == nil {
			continue // the cut left a decodable file (it cannot, short of a CRC collision)
		}
		cuts++
		writeFile(t, path, b, 0o600)
		writeFile(t, JournalPath(path), jrnl, 0o600)
		got, err := NewStore(path, Flock).Read()
		if err != nil {
			t.Fatalf("cut at %d: read: %v", k, err)
		}
		if w, _ := got.Lookup("FILES", "/cache/rank999.ckpt").Value("WRITTEN"); w != "65536" {
			t.Fatalf("cut at %d: read completes to WRITTEN %q, want 65536", k, w)
		}
		if !bytes.Equal(readFile(t, path), b) {
			t.Fatalf("cut at %d: a read changed the file", k)
		}
		if _, _, err := NewStore(path, Flock).Update(func(*Tree) error { return nil }); err != nil {
			t.Fatalf("cut at %d: update: %v", k, err)
		}
		if !bytes.Equal(readFile(t, path), newImg) {
			t.Fatalf("cut at %d: the update did not write the completed image in place", k)
		}
		if _, err := decodeJournal(readFile(t, JournalPath(path))); err != errJournalDone {
			t.Fatalf("cut at %d: the journal's record is not marked applied after the repair: %v", k, err)
		}
	}
	if cuts == 0 {
		t.Fatal("no cut left the file undecodable: the fixture tests nothing")
	}
}

// TestJournalNeverAppliedWrongly: a journal that is torn, corrupt, done,
// foreign, or the record of another version of the file is never applied:
// a file that decodes is read as it is, and one that does not is reported
// with the reason, both left as they were.
func TestJournalNeverAppliedWrongly(t *testing.T) {
	path, oldImg, newImg, jrnl := journalFixture(t, 1000)
	tornImg := torn(oldImg, newImg, 2*journalPage)
	flip := func(b []byte, i int) []byte { c := append([]byte{}, b...); c[i] ^= 0x40; return c }
	done := append([]byte{}, jrnl...)
	binary.BigEndian.PutUint32(done[4:], journalDone)
	// Another writer's version: one byte changed before the record's
	// start (its first bytes, as the record starts in the header here).
	other := flip(tornImg, 6)
	cases := []struct {
		name    string
		file    []byte
		jrnl    []byte
		mode    os.FileMode
		wantErr string // "" when the file must read as it is
	}{
		{"decodable file, pending journal", newImg, jrnl, 0o600, ""},
		{"old file, pending journal (killed before the rewrite)", oldImg, jrnl, 0o600, ""},
		{"torn file, torn journal", tornImg, jrnl[:len(jrnl)-100], 0o600, "does not fit"},
		{"torn file, journal with a flipped byte", tornImg, flip(jrnl, len(jrnl)-7), 0o600, "fails its CRC"},
		{"torn file, journal header flipped", tornImg, flip(jrnl, 17), 0o600, "journal"},
		{"torn file, journal done", tornImg, done, 0o600, "header says"},
		{"torn file, no journal", tornImg, nil, 0, "header says"},
		{"torn file, empty journal", tornImg, []byte{}, 0o600, "shorter than its header"},
		{"torn file, garbage journal", tornImg, bytes.Repeat([]byte{0xa5}, 4096), 0o600, "bad magic"},
		{"torn file, journal others may write", tornImg, jrnl, 0o622, "writable by others"},
		{"another version of the file, torn", other, jrnl, 0o600, "another version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, path, c.file, 0o600)
			os.Remove(JournalPath(path))
			if c.jrnl != nil {
				writeFile(t, JournalPath(path), c.jrnl, c.mode)
			}
			for _, op := range []string{"read", "update"} {
				s := NewStore(path, Flock)
				var err error
				if op == "read" {
					_, err = s.Read()
				} else {
					_, _, err = s.Update(func(*Tree) error { return nil })
				}
				switch {
				case c.wantErr == "" && err != nil:
					t.Fatalf("%s: %v", op, err)
				case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), path)):
					t.Fatalf("%s: error %v, want one naming %s and saying %q", op, err, path, c.wantErr)
				}
				if !bytes.Equal(readFile(t, path), c.file) {
					t.Fatalf("%s changed the file", op)
				}
			}
		})
	}
}

// TestJournalOnlyWhenAKillCanTear: a rewrite within one page (a kill cannot
// split it) writes no journal; one across pages does.
func TestJournalOnlyWhenAKillCanTear(t *testing.T) {
	cases := []struct {
		from, end int
		want      bool
	}{
		{0, 0, false},
		{10, 10, false},
		{0, journalPage, false},
		{100, 4000, false},
		{journalPage, 2 * journalPage, false},
		{4000, 4100, true},
		{0, journalPage + 1, true},
		{8, 300000, true},
	}
	for _, c := range cases {
		if got := needsJournal(c.from, c.end); got != c.want {
			t.Errorf("needsJournal(%d, %d) = %v, want %v", c.from, c.end, got, c.want)
		}
	}
	path := filepath.Join(t.TempDir(), "small.scrinfo")
	s := NewStore(path, Flock)
	if _, _, err := s.Update(func(tr *Tree) error { tr.SetValue("COMMAND", "RUN"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(JournalPath(path)); !os.IsNotExist(err) {
		t.Fatalf("a one-page rewrite wrote a journal: %v", err)
	}
}

// FuzzDecodeJournal: no journal bytes make the decoder or the roll
// forward panic or read out of bounds, and a record that rolls forward
// always gives an image that decodes with the CRC it names.
func FuzzDecodeJournal(f *testing.F) {
	img := Encode(New())
	f.Add(encodeJournal(img, 0), img)
	f.Add(encodeJournal(img, 8), img[:12])
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, jb, file []byte) {
		r, err := decodeJournal(jb)
		if err != nil {
			return
		}
		out, err := rollForward(file, r)
		if err != nil {
			return
		}
		if _, err := Decode(out); err != nil || imageCRC(out) != r.crc {
			t.Fatalf("rolled forward to an image that does not decode (%v) or holds another CRC", err)
		}
	})
}

// encodeJournal returns the record journal.record writes for a rewrite of
// img from from.
func encodeJournal(img []byte, from int) []byte {
	h := journalHead(img, from)
	return append(h[:], img[from:]...)
}
