package cache

import "strconv"

// count returns "1 noun" or "n nouns".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// rangeList accumulates ranges supplied in ascending order of offset and
// merges each one into the previous range when they overlap or touch.
type rangeList []Range

func (l *rangeList) add(off, n int64) {
	if n <= 0 {
		return
	}
	if k := len(*l); k > 0 {
		last := &(*l)[k-1]
		if off <= last.End() {
			if end := off + n; end > last.End() {
				last.Len = end - last.Off
			}
			return
		}
	}
	*l = append(*l, Range{Off: off, Len: n})
}
