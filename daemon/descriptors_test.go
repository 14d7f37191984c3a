package daemon

import (
	"fmt"
	"slices"
	"testing"

	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestDescriptorPlan: the streams and a group's descriptors fit the limit
// with the descriptors open already and the reserve, down to one stream
// and one file with its directory per group.
func TestDescriptorPlan(t *testing.T) {
	for _, tc := range []struct {
		limit, inUse, streams int
		wantStreams, wantFDs  int
	}{
		{32, 8, 4, 1, 2},
		{64, 8, 4, 4, 8},
		{64, 10, 4, 4, 7},
		{1024, 10, 4, 4, 487},
		{20, 10, 4, 1, 2}, // below what is needed: one file at a time
	} {
		t.Run(fmt.Sprint(tc.limit, "/", tc.inUse), func(t *testing.T) {
			s, fds := descriptorPlan(tc.limit, tc.inUse, tc.streams)
			if s != tc.wantStreams || fds != tc.wantFDs {
				t.Fatalf("descriptorPlan = %d streams, %d per group; want %d, %d", s, fds, tc.wantStreams, tc.wantFDs)
			}
		})
	}
}

// TestGroupEndsBoundedByDescriptors: a group closes before its partial
// copies and the directories opened for them would exceed its descriptors,
// a directory counted once per group.
func TestGroupEndsBoundedByDescriptors(t *testing.T) {
	jobs := func(dests ...string) []*job {
		var js []*job
		for _, d := range dests {
			js = append(js, &job{file: transfer.File{Dest: d, Size: 10}})
		}
		return js
	}
	for _, tc := range []struct {
		name  string
		subs  []*job
		fds   int
		files int
		want  []int
	}{
		{"a directory per file", jobs("/p/a/1", "/p/b/2", "/p/c/3", "/p/d/4", "/p/e/5"), 4, 100, []int{2, 4, 5}},
		{"one directory", jobs("/p/a/1", "/p/a/2", "/p/a/3", "/p/a/4", "/p/a/5"), 4, 100, []int{3, 5}},
		{"a directory seen again in a new group", jobs("/p/a/1", "/p/b/2", "/p/a/3"), 3, 100, []int{1, 2, 3}},
		{"files bound first", jobs("/p/a/1", "/p/a/2", "/p/a/3"), 100, 2, []int{2, 3}},
		{"no descriptor bound", jobs("/p/a/1", "/p/b/2", "/p/c/3"), 0, 100, []int{3}},
		{"too few for one file", jobs("/p/a/1", "/p/b/2"), 1, 100, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &daemon{}
			d.cfg.Flush.SyncBytes = 1 << 20
			if got := d.groupEnds(tc.subs, tc.files, tc.fds); !slices.Equal(got, tc.want) {
				t.Fatalf("groupEnds = %v, want %v", got, tc.want)
			}
		})
	}
}
