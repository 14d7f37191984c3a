package daemon

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// refuseConflicts sets the Problem of every entry that cannot be flushed
// whatever the files hold, because it contradicts itself or another entry:
//
//   - two entries with one DESTINATION: both would be reported complete
//     while the path holds one of them, and which one the library meant is
//     unknowable, so both are refused;
//   - a DESTINATION ending in the partial-copy suffix: it would be taken for
//     (and removed as) a partial copy;
//   - a DESTINATION that is a FILES source (its own or another entry's):
//     the copy would overwrite a source, perhaps before it is copied.
//
// The reason is set in problems, at the entry's index, unless one is there
// already. Paths are compared cleaned.
func refuseConflicts(files []transfer.File, problems []error) {
	dests := make(map[string][]int, len(files))
	srcs := make(map[string]string, len(files))
	for i, f := range files {
		if f.Dest != "" {
			d := filepath.Clean(f.Dest)
			dests[d] = append(dests[d], i)
		}
		srcs[filepath.Clean(f.Src)] = f.Src
	}
	refuse := func(i int, err error) {
		if problems[i] == nil {
			problems[i] = err
		}
	}
	for i, f := range files {
		if f.Dest == "" {
			continue
		}
		d := filepath.Clean(f.Dest)
		if strings.HasSuffix(d, flush.PartialSuffix) {
			refuse(i, fmt.Errorf("DESTINATION %s ends in %s, the suffix of the daemon's partial copies", f.Dest, flush.PartialSuffix))
		}
		if src, ok := srcs[d]; ok {
			if src == f.Src {
				refuse(i, fmt.Errorf("DESTINATION %s is the entry's own source", f.Dest))
			} else {
				refuse(i, fmt.Errorf("DESTINATION %s is the source of FILES entry %s", f.Dest, src))
			}
		}
		if same := dests[d]; len(same) > 1 {
			other := same[0]
			if other == i {
				other = same[1]
			}
			refuse(i, fmt.Errorf("DESTINATION %s is also the DESTINATION of FILES entry %s", f.Dest, files[other].Src))
		}
	}
}
