package flush

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordRoundTrip: a record decodes to itself; malformed ones are
// refused, never taken for a record of some other owner or length.
func TestRecordRoundTrip(t *testing.T) {
	rec := partialRecord{owner: ownerDigest("node1\x00/ctl/t.scrinfo"), token: newToken(), src: "0123456789abcdef",
		ino: 42, written: 1 << 40, crc: 0xdeadbeef}
	got, err := parseRecord(rec.encode())
	if err != nil || got != rec {
		t.Fatalf("parseRecord(%q) = %+v, %v", rec.encode(), got, err)
	}
	for _, bad := range []string{
		"",
		"0123456789abcdef0123456789abcdef", // the record of earlier versions
		"v2 o=a t=b s=c i=1 w=2",
		"v3 o=a t=b s=c i=1 w=2 c=00000000",
		"v2 o=a t=b s=c i=x w=2 c=00000000",
		"v2 o=a t=b s=c i=1 w=-2 c=00000000",
		"v2 o=a t=b s=c i=1 w=2 c=1ffffffff",
		"v2 o= t=b s=c i=1 w=2 c=00000000",
		"v2 o=a t=b s=c i=1 w=2 x=00000000",
	} {
		if _, err := parseRecord(bad); err == nil {
			t.Errorf("parseRecord(%q) accepted", bad)
		}
	}
}

// TestXattrName: the name the raw system calls use is identityXattr.
func TestXattrName(t *testing.T) {
	if got := string(xattrName[:len(xattrName)-1]); got != identityXattr || xattrName[len(xattrName)-1] != 0 {
		t.Fatalf("xattrName = %q, want %q NUL-terminated", got, identityXattr)
	}
}

// TestOwnerDigest: owners differ by host and by transfer file.
func TestOwnerDigest(t *testing.T) {
	a, b, c := ownerDigest("n1\x00/t"), ownerDigest("n2\x00/t"), ownerDigest("n1\x00/u")
	if a == b || a == c || a != ownerDigest("n1\x00/t") || strings.ContainsAny(a, " =") {
		t.Fatalf("digests %q %q %q", a, b, c)
	}
}

func TestParseUmask(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   uint32
		ok     bool
	}{
		{"Name:\tx\nUmask:\t0022\nState:\tR\n", 0o022, true},
		{"Umask:\t0002\n", 0o002, true},
		{"Umask:\t0077", 0o077, true},
		{"Name:\tx\n", 0, false},
		{"Umask:\tzz\n", 0, false},
	} {
		got, ok := parseUmask(tc.status)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseUmask(%q) = %#o, %v; want %#o, %v", tc.status, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(partialRecord{owner: "o", token: "t", src: "s", ino: 1, written: 2, crc: 3}.encode())
	f.Add("v2 o=a t=b s=c i=1 w=2 c=00000000")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		rec, err := parseRecord(s)
		if err != nil {
			return
		}
		again, err := parseRecord(rec.encode())
		if err != nil || again != rec {
			t.Fatalf("%q decoded to %+v, which re-encodes to %q (%v)", s, rec, rec.encode(), err)
		}
	})
}

func FuzzParseUmask(f *testing.F) {
	f.Add("Umask:\t0022\n")
	f.Fuzz(func(t *testing.T, s string) {
		if m, ok := parseUmask(s); ok && m&^0o777 != 0 {
			t.Fatalf("mask %#o out of range", m)
		}
	})
}

// BenchmarkPartialRecord measures what the record of a partial copy adds
// to each commit (a check of the token and the record rewritten, two
// extended-attribute calls) beside what a commit costs anyway (an fsync of
// the bytes copied since the last one, 1 MiB here), in the same run:
//
//	go test -run '^$' -bench PartialRecord ./flush/
func BenchmarkPartialRecord(b *testing.B) {
	dir := benchDir(b)
	f, err := os.Create(filepath.Join(dir, "partial"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	rec := partialRecord{owner: ownerDigest("n\x00/t"), token: newToken(), src: "0123456789abcdef0123456789abcdef", ino: 1}
	if !writeRecord(fd, rec) {
		b.Skip("no user extended attributes here")
	}
	b.Run("record", func(b *testing.B) {
		for b.Loop() {
			if !hasRecord(fd, rec) {
				b.Fatal("record lost")
			}
			rec.written += 1 << 20
			if !writeRecord(fd, rec) {
				b.Fatal("record not written")
			}
		}
	})
	b.Run("fsync-1MiB", func(b *testing.B) {
		buf := randBytes(1<<20, 7)
		var off int64
		for b.Loop() {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
			off += int64(len(buf))
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
