package units

import (
	"flag"
	"io"
	"math"
	"strings"
	"testing"
)

func TestParseCount(t *testing.T) {
	for _, tc := range []struct {
		in      string
		lo, hi  int64
		want    int64
		wantErr string
	}{
		{in: "4M", lo: 1, hi: 1 << 31, want: 4 << 20},
		{in: "1MB", lo: 1, hi: 1 << 31, want: 1 << 20},
		{in: "1048576", lo: 1, hi: 1 << 31, want: 1 << 20},
		{in: "1.5K", lo: 0, hi: math.MaxInt64, want: 1536},
		{in: "64 MiB", lo: 0, hi: math.MaxInt64, want: 64 << 20},
		{in: "1.5", lo: 0, hi: 10, wantErr: `"1.5" is 1.5 bytes: want a whole number of bytes`},
		{in: "0", lo: 1, hi: 1 << 31, wantErr: `"0": want 1 B to 2.00 GiB`},
		{in: "4G", lo: 1, hi: 1 << 31, wantErr: `"4G": want 1 B to 2.00 GiB`},
		{in: "4X", lo: 1, hi: 1 << 31, wantErr: `unknown unit "X"`},
		{in: "-1", lo: 0, hi: 10, wantErr: "negative"},
	} {
		got, err := ParseCount(tc.in, tc.lo, tc.hi)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseCount(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("ParseCount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestSizeFlags: a size flag takes units, keeps its default when not
// given, and shows its default in a form it reads back.
func TestSizeFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var buf int
	var sync int64
	IntVar(fs, &buf, "buf-size", 1<<20, 1, 1<<31, "")
	Int64Var(fs, &sync, "sync-bytes", 64<<20, 1, math.MaxInt64, "")
	if d := fs.Lookup("buf-size").DefValue; d != "1M" {
		t.Errorf("default shown as %q; want 1M", d)
	}
	if err := fs.Parse([]string{"--buf-size", "4M"}); err != nil || buf != 4<<20 || sync != 64<<20 {
		t.Fatalf("--buf-size 4M: %v, buf %d, sync %d", err, buf, sync)
	}
	if err := fs.Parse([]string{"--sync-bytes=1G"}); err != nil || sync != 1<<30 {
		t.Fatalf("--sync-bytes=1G: %v, %d", err, sync)
	}
	if err := fs.Parse([]string{"--buf-size=0"}); err == nil || !strings.Contains(err.Error(), "want 1 B to 2.00 GiB") {
		t.Fatalf("--buf-size=0: %v", err)
	}
}

func TestCountText(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1K", 1536: "1536", 4 << 20: "4M", 3 << 30: "3G", 1 << 40: "1T"} {
		if got := CountText(n); got != want {
			t.Errorf("CountText(%d) = %q; want %q", n, got, want)
		}
	}
}

// FuzzParseCount: whatever ParseCount accepts is within its bounds, and
// CountText of it reads back to the same count.
func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"4M", "1MB", "1048576", "1.5K", "0", "-1", "1e18", "4X", " 2 GiB/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCount(s, 0, math.MaxInt64)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("%q: %d", s, n)
		}
		if back, err := ParseCount(CountText(n), 0, math.MaxInt64); err != nil || back != n {
			t.Fatalf("%q: %d written %q reads back %d, %v", s, n, CountText(n), back, err)
		}
	})
}

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 files"}, {1, "1 file"}, {2, "2 files"}, {2001, "2001 files"}} {
		if got := Plural(tc.n, "file", "files"); got != tc.want {
			t.Errorf("Plural(%d) = %q; want %q", tc.n, got, tc.want)
		}
	}
}
