package units

import (
	"math"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64 // -1: an error
	}{
		{"0", 0}, {"52428800", 52428800}, {"52428800.000000", 52428800}, {"1e8", 1e8},
		{"50M", 50 << 20}, {"50MB", 50 << 20}, {"50MiB", 50 << 20}, {"50mb", 50 << 20}, {"50 MB/s", 50 << 20},
		{"1.5GiB", 1.5 * (1 << 30)}, {"4k/s", 4096}, {" 2 T ", 2 << 40}, {"1P", 1 << 50}, {"100B", 100},
		{"", -1}, {"-1", -1}, {"-5M", -1}, {"NaN", -1}, {"Inf", -1}, {"1e300G", -1}, {"12 apples", -1}, {"5X", -1},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.want < 0 && err == nil:
			t.Errorf("Parse(%q) = %v, want an error", tc.in, got)
		case tc.want >= 0 && (err != nil || got != tc.want):
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestParseErrorsSayWhy: each kind of mistake gets its own message.
func TestParseErrorsSayWhy(t *testing.T) {
	for in, want := range map[string]string{
		"-5":        `"-5" is negative`,
		"-5M":       `"-5M" is negative`,
		"100X":      `unknown unit "X"`,
		"12 apples": `unknown unit "apples"`,
		"":          "empty value",
		"1e300G":    "too large",
		"abc":       "not a byte count",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want %q", in, err, want)
		}
	}
}

func TestRateWarning(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" : no warning
	}{
		{"0", ""}, {"100M", ""}, {"52428800", ""}, {"1048576", ""}, {"1K", ""}, {"2048", "means 2.00 KiB/s"},
		{"100", "100 has no unit, so it means 100 B/s; for 100 MiB/s write 100M"},
		{"500B", "below 1 KiB/s"}, {"0.5K", "below 1 KiB/s"},
	} {
		v, err := Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got := RateWarning(tc.in, v)
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("RateWarning(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestIEC(t *testing.T) {
	for _, tc := range []struct {
		n    float64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {1536, "1.50 KiB"}, {10 << 20, "10.0 MiB"}, {100 << 30, "100 GiB"}, {math.Pow(1024, 7), "1024 EiB"}} {
		if got := IEC(tc.n); got != tc.want {
			t.Errorf("IEC(%v) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "50M", "1.5GiB", "4k/s", "52428800.000000", "-1", "NaN", "1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err == nil && !(v >= 0 && v <= 1<<62) {
			t.Fatalf("Parse(%q) = %v without an error", s, v)
		}
	})
}
