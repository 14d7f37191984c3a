// Package units parses and formats byte counts and rates the way SCR's
// users and parameters write them.
//
// The convention, everywhere in this project: a number of bytes with an
// optional suffix K, M, G, T or P, each a power of 1024, as in SCR's
// parameters (SCR_FILE_BUF_SIZE=1MB is 1048576 bytes). KB and KiB, MB and
// MiB, and so on are synonyms: both are powers of 1024, because SCR reads
// "MB" that way and a job script copied from SCR's documentation must
// mean what it meant there. A number without a suffix is bytes, and may be
// written in any form C's strtod reads ("52428800.000000", "1e8").
// Suffixes are case-insensitive; "/s" and a space before the suffix are
// allowed. Output is in IEC units (KiB, MiB, GiB), which say what they
// mean.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Convention is the one-line statement of the convention, for --help texts.
const Convention = "K, M, G, T, P are powers of 1024 as in SCR's parameters; KB and KiB, MB and MiB... mean the same"

// maxCount is the largest count Parse accepts: far beyond any real size or
// rate, and exact in an int64.
const maxCount = 1 << 62

// Parse parses a byte count or rate written in the package's convention.
// Its errors say what is wrong: a negative number, an unknown unit, a
// value too large.
func Parse(s string) (float64, error) {
	v, _, err := parse(s)
	return v, err
}

// HasUnit reports whether s, which Parse accepts, carries a unit suffix.
func HasUnit(s string) bool {
	_, unit, err := parse(s)
	return err == nil && unit
}

func parse(s string) (v float64, unit bool, err error) {
	u := strings.TrimSpace(strings.ToUpper(s))
	u = strings.TrimSpace(strings.TrimSuffix(u, "/S"))
	// The units Parse knows, longest first.
	suffixes := [...]struct {
		s string
		m float64
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40}, {"PIB", 1 << 50},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40}, {"PB", 1 << 50},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"P", 1 << 50}, {"B", 1},
	}
	mult := 1.0
	for _, suf := range suffixes {
		if strings.HasSuffix(u, suf.s) {
			u, mult, unit = strings.TrimSpace(strings.TrimSuffix(u, suf.s)), suf.m, true
			break
		}
	}
	v, perr := strconv.ParseFloat(u, 64)
	switch {
	case strings.TrimSpace(s) == "":
		return 0, false, fmt.Errorf("empty value: want a byte count such as 52428800, 50M or 1.5GiB")
	case perr != nil || math.IsNaN(v) || math.IsInf(v, 0):
		if i := strings.IndexFunc(u, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' && r != '+' }); i > 0 {
			return 0, false, fmt.Errorf("%q: unknown unit %q (want K, M, G, T or P, powers of 1024; KB, KiB and the like mean the same)", s, strings.TrimSpace(s[i:]))
		}
		return 0, false, fmt.Errorf("%q is not a byte count such as 52428800, 50M or 1.5GiB", s)
	case v < 0:
		return 0, false, fmt.Errorf("%q is negative: a byte count or rate cannot be below 0", s)
	case v*mult > maxCount:
		return 0, false, fmt.Errorf("%q is too large (more than %s)", s, IEC(maxCount))
	}
	return v * mult, unit, nil
}

// RateWarning returns why a rate limit written as s (and read as v bytes
// per second) is probably a mistake, or "" if it looks deliberate: a
// number without a unit, which means bytes per second where a person
// likely meant MiB/s, or any positive limit below 1 KiB/s, at which a
// checkpoint would take days. 0 (no limit) is never suspicious.
func RateWarning(s string, v float64) string {
	switch {
	case v <= 0:
		return ""
	case !HasUnit(s) && v < 1<<20:
		return fmt.Sprintf("%s has no unit, so it means %s/s; for %s MiB/s write %sM",
			strings.TrimSpace(s), IEC(v), strings.TrimSpace(s), strings.TrimSpace(s))
	case v < 1024:
		return fmt.Sprintf("%s is %s/s, below 1 KiB/s: a checkpoint would take days at that rate", strings.TrimSpace(s), IEC(v))
	}
	return ""
}

// IEC writes n bytes in IEC units with three significant digits
// ("1023 B", "1.50 KiB", "10.0 MiB", "100 GiB").
func IEC(n float64) string {
	const prefixes = "KMGTPE"
	if n < 1024 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	i := -1
	for n >= 1024 && i < len(prefixes)-1 {
		n /= 1024
		i++
	}
	prec := 2
	switch {
	case n >= 100:
		prec = 0
	case n >= 10:
		prec = 1
	}
	return strconv.FormatFloat(n, 'f', prec, 64) + " " + prefixes[i:i+1] + "iB"
}

// Plural writes a count of things for a person: "1 file", "2 files",
// "0 files". many is the plural form ("files", "entries").
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
