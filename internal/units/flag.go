package units

import (
	"flag"
	"fmt"
	"math"
	"strconv"
)

// ParseCount parses a whole number of bytes between lo and hi written in
// the package's convention ("4M", "1MB", "1048576"): the one parser of
// every size a person gives, on the command line or in the environment.
func ParseCount(s string, lo, hi int64) (int64, error) {
	v, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("%q is %s bytes: want a whole number of bytes", s, strconv.FormatFloat(v, 'f', -1, 64))
	}
	if n := int64(v); n < lo || n > hi {
		return 0, fmt.Errorf("%q: want %s to %s", s, countText(lo), countText(hi))
	}
	return int64(v), nil
}

// countText writes a bound of ParseCount: bytes below 1 KiB, else IEC.
func countText(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return IEC(float64(n))
}

// Int64Var defines a size flag on fs: a whole byte count from lo to hi,
// with the units ParseCount takes.
func Int64Var(fs *flag.FlagSet, p *int64, name string, def, lo, hi int64, usage string) {
	*p = def
	fs.Var(&countValue{p: p, lo: lo, hi: hi}, name, usage)
}

// IntVar is Int64Var for an int.
func IntVar(fs *flag.FlagSet, p *int, name string, def int, lo, hi int64, usage string) {
	*p = def
	fs.Var(&intCountValue{p: p, lo: lo, hi: hi}, name, usage)
}

// countValue is a flag.Value holding a byte count.
type countValue struct {
	p      *int64
	lo, hi int64
}

func (v *countValue) Set(s string) error {
	n, err := ParseCount(s, v.lo, v.hi)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

func (v *countValue) String() string {
	if v == nil || v.p == nil {
		return "0"
	}
	return CountText(*v.p)
}

// Get makes the flag a flag.Getter.
func (v *countValue) Get() any { return *v.p }

// Placeholder names the value in help texts.
func (v *countValue) Placeholder() string { return "SIZE" }

// intCountValue is a flag.Value holding a byte count in an int.
type intCountValue struct {
	p      *int
	lo, hi int64
}

func (v *intCountValue) Set(s string) error {
	n, err := ParseCount(s, v.lo, v.hi)
	if err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}

func (v *intCountValue) String() string {
	if v == nil || v.p == nil {
		return "0"
	}
	return CountText(int64(*v.p))
}

// Get makes the flag a flag.Getter.
func (v *intCountValue) Get() any { return *v.p }

// Placeholder names the value in help texts.
func (v *intCountValue) Placeholder() string { return "SIZE" }

// CountText writes n bytes in the shortest form ParseCount reads back
// exactly: "4M" for 4 MiB, "1536K", "1000": a flag's default in --help.
func CountText(n int64) string {
	for _, u := range [...]struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
