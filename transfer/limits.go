package transfer

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// MinBW is the smallest BW limit, in bytes per second, that can be in
// force: a positive BW below it is raised to it. 0 means no limit.
const MinBW = 1

// MaxPercent is the largest PERCENT: the whole of the time, no limit. A
// PERCENT above it is lowered to it.
const MaxPercent = 100

// Limits is the reading of the BW and PERCENT values of a transfer file:
// the one reading the daemon and scr-ctl share, so that both say the same
// of the same file.
type Limits struct {
	// BW is the rate limit in force in bytes per second, 0 for none;
	// meaningless when BWKept.
	BW float64
	// Percent is the share of wall time in force, in percent, 0 (or 100)
	// for none; meaningless when PercentKept.
	Percent float64
	// BWKept and PercentKept say that the value in the file is unusable
	// (not a number, negative, several values): the daemon keeps the limit
	// it had in force before, which only it knows.
	BWKept, PercentKept bool
	// Problems says, for each value out of range or unusable, what was
	// found and what is in force instead; nil when both are sound.
	Problems []error
}

// ReadLimits reads BW and PERCENT as written in a transfer file: bw and
// percent are the raw values, "" when absent (no limit). A value out of
// range is brought to the nearest one allowed (a BW above 0 but below
// MinBW to MinBW, a PERCENT above MaxPercent to MaxPercent); an unusable
// one (not a number, negative, infinite) is kept out: the previous limit
// stays in force. Either way the problem names the value and what is in
// force. It is a pure function of its input.
func ReadLimits(bw, percent string) Limits {
	var l Limits
	var p error
	l.BW, l.BWKept, p = readBW(bw)
	if p != nil {
		l.Problems = append(l.Problems, p)
	}
	l.Percent, l.PercentKept, p = readPercent(percent)
	if p != nil {
		l.Problems = append(l.Problems, p)
	}
	return l
}

// keptText is what a problem says when the previous limit stays in force.
const keptText = "the limit in force before stays in force (the daemon's log says which)"

// readBW reads one BW value.
func readBW(s string) (v float64, kept bool, problem error) {
	v, err := readNumber(KeyBW, s)
	switch {
	case err != nil:
		return 0, true, fmt.Errorf("%w; %s", err, keptText)
	case v > 0 && v < MinBW:
		return MinBW, false, fmt.Errorf("%s %s is below %d B/s (0 means no limit): %d B/s is in force; write the unit, as in 0.5M, for MiB/s",
			KeyBW, strings.TrimSpace(s), MinBW, MinBW)
	}
	return v, false, nil
}

// readPercent reads one PERCENT value.
func readPercent(s string) (v float64, kept bool, problem error) {
	v, err := readNumber(KeyPercent, s)
	switch {
	case err != nil:
		return 0, true, fmt.Errorf("%w; %s", err, keptText)
	case v > MaxPercent:
		return MaxPercent, false, fmt.Errorf("%s %s is above %d: %d (no limit on the time spent copying) is in force",
			KeyPercent, strings.TrimSpace(s), MaxPercent, MaxPercent)
	}
	return v, false, nil
}

// readNumber parses a non-negative finite number written as C's strtod
// reads it; "" is 0 (the key is absent).
func readNumber(key, s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(t, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s %q is not a number", key, s)
	case v < 0 || math.IsNaN(v) || math.IsInf(v, 0):
		return 0, fmt.Errorf("%s %q is not a non-negative number", key, s)
	}
	return v, nil
}

// readLimits reads the raw BW and PERCENT of t into ReadLimits; a key with
// several values is unusable as a whole.
func readLimits(t *hashfile.Tree) Limits {
	bw, bwErr := rawValue(t, KeyBW)
	pct, pctErr := rawValue(t, KeyPercent)
	l := ReadLimits(bw, pct)
	if bwErr != nil {
		l.BW, l.BWKept = 0, true
		l.Problems = append([]error{fmt.Errorf("%w; %s", bwErr, keptText)}, l.Problems...)
	}
	if pctErr != nil {
		l.Percent, l.PercentKept = 0, true
		l.Problems = append(l.Problems, fmt.Errorf("%w; %s", pctErr, keptText))
	}
	return l
}

// rawValue returns the single value of key, "" if absent, and an error if
// the key holds several (or none).
func rawValue(t *hashfile.Tree, key string) (string, error) {
	if v, ok := t.Value(key); ok {
		if v == "" {
			return "", fmt.Errorf("%s: empty value", key)
		}
		return v, nil
	}
	if t.Has(key) {
		return "", fmt.Errorf("%s: want one value, found %d", key, t.Get(key).Len())
	}
	return "", nil
}
