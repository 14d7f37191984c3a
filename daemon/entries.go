package daemon

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/internal/backoff"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// fileKey identifies the file a path names, as the kernel finds it: the
// deepest directory on the path that exists (its device and inode, found
// through every symbolic link and ".." on the way), and the rest of the
// path below it, the name itself when its directory exists. Two paths
// that differ as strings but lead through symbolic links, bind mounts or
// "dir/link/.." to one directory and name have one key. A path whose
// directory cannot be looked at (no permission) keys by its cleaned
// string alone.
type fileKey struct {
	dev, ino uint64
	rest     string
}

// keyer works out fileKeys, looking each directory up once.
type keyer map[string]dirLookup

// dirLookup is what a directory's stat(2) found.
type dirLookup struct {
	dev, ino uint64
	found    int8 // dirFound, dirMissing or dirUnknown
}

const (
	dirFound   = iota + 1
	dirMissing // ENOENT: look at its parent
	dirUnknown // not a directory, or it cannot be looked at
)

// dir looks directory dir up, following symbolic links.
func (k keyer) dir(dir string) dirLookup {
	if l, ok := k[dir]; ok {
		return l
	}
	var st unix.Stat_t
	err := unix.Stat(dir, &st)
	l := dirLookup{found: dirUnknown}
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		l = dirLookup{dev: st.Dev, ino: st.Ino, found: dirFound}
	case errors.Is(err, unix.ENOENT):
		l.found = dirMissing
	}
	k[dir] = l
	return l
}

// key returns the fileKey of path. The copy resolves the cleaned path
// (flush cleans it), so ".." is taken lexically first, as the copy does.
func (k keyer) key(path string) fileKey {
	p := filepath.Clean(path)
	dir, rest := filepath.Dir(p), filepath.Base(p)
	for {
		switch l := k.dir(dir); l.found {
		case dirFound:
			return fileKey{dev: l.dev, ino: l.ino, rest: rest}
		case dirUnknown:
			return fileKey{rest: p}
		}
		if dir == "/" || dir == "." {
			return fileKey{rest: p}
		}
		dir, rest = filepath.Dir(dir), filepath.Base(dir)+"/"+rest
	}
}

// protected is what no DESTINATION may name: the daemon's control files
// (the transfer file and its sidecars beside it, ".NAME.lock" and
// ".NAME.journal" among them) and the extra files it writes, such as the
// metrics file (and its temporary files, "."+name+".tmp…" beside it).
type protected struct {
	files []protectedFile
}

// protectedFile is a file, and the names beside it beginning with prefix
// when prefix is set.
type protectedFile struct {
	path   string
	key    fileKey
	prefix string
	what   string
}

// protect works out the keys of the control files of transferFile and of
// the extra files.
func (k keyer) protect(transferFile string, extra []string) protected {
	base := filepath.Base(transferFile)
	p := protected{files: []protectedFile{{path: transferFile, key: k.key(transferFile), prefix: "." + base + ".",
		what: "the transfer file, or its instance lock or journal beside it"}}}
	for _, e := range extra {
		if e != "" {
			p.files = append(p.files, protectedFile{path: e, key: k.key(e), prefix: "." + filepath.Base(e) + ".tmp",
				what: "a file of the daemon's (or its temporary)"})
		}
	}
	return p
}

// check returns why a DESTINATION of key d may not be written, nil if it
// may. A name compares within its directory, so a DESTINATION reaching the
// file through a symbolic link or ".." is refused too.
func (p protected) check(dest string, d fileKey) error {
	dir, name := filepath.Split(d.rest)
	for _, f := range p.files {
		fdir, fname := filepath.Split(f.key.rest)
		if d.dev != f.key.dev || d.ino != f.key.ino || dir != fdir {
			continue
		}
		if name == fname || strings.HasPrefix(name, f.prefix) {
			return fmt.Errorf("DESTINATION %s is %s %s", dest, f.what, f.path)
		}
	}
	return nil
}

// refuseConflicts sets the Problem of every entry that cannot be flushed
// whatever the files hold, because it contradicts itself, another entry or
// the daemon's own files:
//
//   - two entries with one DESTINATION: both would be reported complete
//     while the path holds one of them, and which one the library meant is
//     unknowable, so both are refused;
//   - a DESTINATION ending in the partial-copy suffix: it would be taken for
//     (and removed as) a partial copy;
//   - a DESTINATION that is a FILES source (its own or another entry's):
//     the copy would overwrite a source, perhaps before it is copied;
//   - a DESTINATION that is one of the daemon's own files (prot): the copy
//     would replace the transfer file, the instance lock, the journal or
//     the metrics file.
//
// The reason is set in problems, at the entry's index, unless one is there
// already. Paths are compared as the files they name (see fileKey), so an
// alias through a symbolic link or ".." is the same path. What they name
// can change with the file system (a link swapped in, then back), so
// refuseConflicts reports whether it refused any entry by comparing files:
// those refusals are to be worked out again (see recheck).
func refuseConflicts(files []transfer.File, problems []error, k keyer, prot protected) (byFile bool) {
	keys := make([]fileKey, len(files))
	dests := make(map[fileKey][]int, len(files))
	srcs := make(map[fileKey]string, len(files))
	for i, f := range files {
		if f.Dest != "" {
			keys[i] = k.key(f.Dest)
			dests[keys[i]] = append(dests[keys[i]], i)
		}
		srcs[k.key(f.Src)] = f.Src
	}
	refuse := func(i int, err error) {
		if problems[i] == nil {
			problems[i] = err
		}
		byFile = true
	}
	for i, f := range files {
		if f.Dest == "" {
			continue
		}
		if strings.HasSuffix(filepath.Clean(f.Dest), flush.PartialSuffix) && problems[i] == nil {
			problems[i] = fmt.Errorf("DESTINATION %s ends in %s, the suffix of the daemon's partial copies", f.Dest, flush.PartialSuffix)
		}
		if err := prot.check(f.Dest, keys[i]); err != nil {
			refuse(i, err)
		}
		if src, ok := srcs[keys[i]]; ok {
			if src == f.Src {
				refuse(i, fmt.Errorf("DESTINATION %s is the entry's own source", f.Dest))
			} else {
				refuse(i, fmt.Errorf("DESTINATION %s is the source of FILES entry %s", f.Dest, src))
			}
		}
		if same := dests[keys[i]]; len(same) > 1 {
			other := same[0]
			if other == i {
				other = same[1]
			}
			refuse(i, fmt.Errorf("DESTINATION %s is also the DESTINATION of FILES entry %s%s", f.Dest, files[other].Src, alias(f.Dest, files[other].Dest)))
		}
	}
	return byFile
}

// recheck is when the refusals found by comparing files are worked out
// again: they may have come from a moment's state of the file system (a
// directory swapped for a link and back), and while they stand nothing else
// makes the daemon look again. The wait doubles from the retry back-off's
// floor to its ceiling while they last; the zero value means none stand.
type recheck struct {
	tries int
	at    time.Time
}

// after schedules the next look, after a computation at now that found
// refusals by comparing files (byFile) or none.
func (r *recheck) after(now time.Time, byFile bool, lo, hi time.Duration) {
	if !byFile {
		*r = recheck{}
		return
	}
	r.at = backoff.Policy{First: lo, Max: hi, Factor: 2}.At(now, r.tries, 0)
	r.tries++
}

// due reports whether the refusals are to be worked out again at now.
func (r recheck) due(now time.Time) bool { return !r.at.IsZero() && !now.Before(r.at) }

// alias notes that two DESTINATIONs that name one file differ as paths.
func alias(a, b string) string {
	if filepath.Clean(a) == filepath.Clean(b) {
		return ""
	}
	return " (" + b + ", the same file through another path)"
}
