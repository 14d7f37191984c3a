// Package units parses and formats byte counts the way SCR's users and
// parameters write them: K, M, G and T mean powers of 1024.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse parses a byte count or rate: a decimal number with an
// optional suffix K, M, G, T (powers of 1024, as SCR's parameters; KB, KiB
// and friends mean the same), with or without "/s".
func Parse(s string) (float64, error) {
	u := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "/S")
	mult := 1.0
	for _, suf := range []struct {
		s string
		m float64
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	} {
		if strings.HasSuffix(u, suf.s) {
			u, mult = strings.TrimSpace(strings.TrimSuffix(u, suf.s)), suf.m
			break
		}
	}
	v, err := strconv.ParseFloat(u, 64)
	if err != nil || !(v >= 0) || v*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a byte count such as 52428800, 50M or 1.5GiB", s)
	}
	return v * mult, nil
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
