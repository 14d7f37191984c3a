package flush

import (
	"errors"
	"slices"
	"testing"
)

func TestNormalizeRanges(t *testing.T) {
	tests := []struct {
		name string
		in   []Range
		size int64
		want []Range
		err  bool
	}{
		{"empty", []Range{}, 10, []Range{}, false},
		{"sorted disjoint", []Range{{Off: 0, Len: 2}, {Off: 5, Len: 2}}, 10, []Range{{Off: 0, Len: 2}, {Off: 5, Len: 2}}, false},
		{"unsorted", []Range{{Off: 5, Len: 2}, {Off: 0, Len: 2}}, 10, []Range{{Off: 0, Len: 2}, {Off: 5, Len: 2}}, false},
		{"overlap", []Range{{Off: 0, Len: 5}, {Off: 3, Len: 4}}, 10, []Range{{Off: 0, Len: 7}}, false},
		{"touching", []Range{{Off: 0, Len: 5}, {Off: 5, Len: 5}}, 10, []Range{{Off: 0, Len: 10}}, false},
		{"contained", []Range{{Off: 0, Len: 8}, {Off: 2, Len: 2}}, 10, []Range{{Off: 0, Len: 8}}, false},
		{"zero length dropped", []Range{{Off: 3, Len: 0}, {Off: 4, Len: 1}}, 10, []Range{{Off: 4, Len: 1}}, false},
		{"up to size", []Range{{Off: 9, Len: 1}}, 10, []Range{{Off: 9, Len: 1}}, false},
		{"beyond size", []Range{{Off: 9, Len: 2}}, 10, nil, true},
		{"offset beyond size", []Range{{Off: 11, Len: 0}}, 10, nil, true},
		{"negative offset", []Range{{Off: -1, Len: 2}}, 10, nil, true},
		{"negative length", []Range{{Off: 1, Len: -2}}, 10, nil, true},
		{"overflow", []Range{{Off: 5, Len: 1<<63 - 1}}, 10, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalizeRanges(nil, tc.in, tc.size)
			if tc.err {
				if !errors.Is(err, ErrInvalidJob) {
					t.Fatalf("err = %v, want ErrInvalidJob", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzNormalizeRanges feeds hostile ranges (as a cache-format parser might
// pass on) and checks the output is sorted, disjoint, within the file,
// covers exactly the same bytes, and never longer than the input.
func FuzzNormalizeRanges(f *testing.F) {
	f.Add([]byte{0, 4, 8, 4, 2, 3}, uint8(32))
	f.Add([]byte{250, 10, 0, 0}, uint8(255))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, size uint8) {
		var in []Range
		for i := 0; i+1 < len(raw); i += 2 {
			in = append(in, Range{Off: int64(int8(raw[i])), Len: int64(int8(raw[i+1]))})
		}
		got, err := normalizeRanges(nil, in, int64(size))
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(got) > len(in) {
			t.Fatalf("%d ranges out of %d", len(got), len(in))
		}
		cover := make([]bool, int(size)+1)
		for _, r := range in {
			for o := r.Off; o < r.Off+r.Len; o++ {
				cover[o] = true
			}
		}
		for i, r := range got {
			if r.Len <= 0 || r.Off < 0 || r.Off+r.Len > int64(size) {
				t.Fatalf("bad range %v", r)
			}
			if i > 0 && got[i-1].Off+got[i-1].Len >= r.Off {
				t.Fatalf("ranges not sorted and disjoint: %v", got)
			}
			for o := r.Off; o < r.Off+r.Len; o++ {
				if !cover[o] {
					t.Fatalf("byte %d covered by the output only", o)
				}
				cover[o] = false
			}
		}
		if slices.Contains(cover, true) {
			t.Fatalf("output %v misses bytes of %v", got, in)
		}
	})
}
