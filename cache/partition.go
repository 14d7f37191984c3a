package cache

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A SciDAC partition set (volfmt 1 to 3) is several LIME files: the master
// volume holds the XML, its own sites and the checksums of the whole
// lattice; every other volume holds a site list and one binary record per
// field record. The set is complete when the site lists together cover
// every lattice site exactly once.

// errNoVolume reports a partition volume that vanished between listing and
// opening.
var errNoVolume = errors.New("partition volume disappeared")

// partitionVolume is one file of a partition set.
type partitionVolume struct {
	path  string
	lf    *limeFile
	self  bool
	size  int64
	sites int64 // entries in its site list
	width int   // bytes per site list entry
}

// inspectPartition validates a partition volume as part of its set: every
// volume beside it frames correctly, exactly one is the master, the site
// lists cover the lattice exactly once and every binary record has the
// length its site count implies. Inspecting the master also verifies the
// checksums of the whole set, since only the master holds them.
func inspectPartition(s *source, fsys fileSystem, self *limeFile, rep *Report) error {
	vols := []*partitionVolume{{path: s.path, lf: self, self: true, size: s.size}}
	paths, err := partitionSiblings(fsys, s.path)
	if err != nil {
		return fmt.Errorf("cache: %s: listing partition volumes: %w", s.path, err)
	}
	for _, p := range paths {
		v := &partitionVolume{path: p}
		err := withVolume(s, fsys, v, func(vs *source) error {
			lf, err := readLIMEFile(vs)
			v.lf, v.size = lf, vs.size
			return err
		})
		if errors.Is(err, errNoVolume) {
			continue
		}
		if err != nil {
			return err
		}
		if v.lf.role != roleMaster && v.lf.role != roleVolume {
			return s.fail(LIME, "E_SCIDAC", -1, "%s is named as a volume of this partition set but is not a partition volume", p)
		}
		vols = append(vols, v)
		rep.Companions = append(rep.Companions, p)
	}
	var master *partitionVolume
	for _, v := range vols {
		if v.lf.role == roleMaster {
			if master != nil {
				return s.fail(LIME, "E_SCIDAC", -1, "two master volumes: %s and %s", master.path, v.path)
			}
			master = v
		}
	}
	if master == nil {
		return s.fail(LIME, "E_INCOMPLETE_SET", -1, "no master volume (the one with %s) among the %d volumes found", typePrivateFileXML, len(vols))
	}
	m := master.lf
	var field []*scidacRecord // records stored in every volume
	for i := range m.records {
		rec := &m.records[i]
		switch rec.kind {
		case recordHypercube:
			return s.fail(LIME, "E_UNSUPPORTED", rec.bin.off, "hypercube record in message %d of partition master %s cannot be verified", rec.msg, master.path)
		case recordField:
			field = append(field, rec)
		}
	}

	// Site counts and record lengths.
	total := int64(0)
	for _, v := range vols {
		bins := v.lf.binaries
		if v == master {
			bins = make([]*limeRecord, len(field))
			for j, rec := range field {
				bins[j] = rec.bin
			}
		} else if len(bins) != len(field) {
			return s.fail(LIME, "E_SCIDAC", -1, "volume %s holds %d binary records, the master %s lists %d field records", v.path, len(bins), master.path, len(field))
		}
		v.lf.binaries = bins
		sl := v.lf.sitelist
		v.width = 4
		if m.sites > 1<<32 {
			v.width = 8
			if len(field) > 0 && sl.length == 4*(bins[0].length/field[0].datum) {
				v.width = 4
			}
		}
		if sl.length%int64(v.width) != 0 {
			return s.fail(LIME, "E_SITELIST", sl.off, "volume %s: site list of %d bytes is not a whole number of %d-byte entries", v.path, sl.length, v.width)
		}
		v.sites = sl.length / int64(v.width)
		total += v.sites
		for j, rec := range field {
			where := ""
			if !v.self {
				where = " of volume " + v.path
			}
			if err := checkLength(s, rec, bins[j], v.sites, where); err != nil {
				return err
			}
		}
	}
	if total < m.sites {
		return s.fail(LIME, "E_INCOMPLETE_SET", -1, "the site lists of the %d volumes found cover %d of the %d lattice sites", len(vols), total, m.sites)
	}
	if total > m.sites {
		return s.fail(LIME, "E_SITELIST", -1, "the site lists of the %d volumes found hold %d entries for %d lattice sites", len(vols), total, m.sites)
	}
	seen := make([]uint64, (m.sites+63)/64)
	for _, v := range vols {
		err := withVolume(s, fsys, v, func(vs *source) error {
			ranks := newListRanks(vs, v.lf.sitelist, v.width)
			for i := int64(0); i < v.sites; i++ {
				r, err := ranks.next()
				if err != nil {
					return err
				}
				if r >= uint64(m.sites) {
					return s.fail(LIME, "E_SITELIST", -1, "volume %s: site rank %d outside the lattice of %d sites", v.path, r, m.sites)
				}
				if seen[r/64]&(1<<(r%64)) != 0 {
					return s.fail(LIME, "E_SITELIST", -1, "volume %s: site %d is stored twice in the set", v.path, r)
				}
				seen[r/64] |= 1 << (r % 64)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if !self.isMaster() {
		rep.Detail = fmt.Sprintf("lime %s, scidac partition volume with %d of %d sites, set of %s complete; checksums are verified with the master %s",
			count(int64(len(self.recs)), "record"), vols[0].sites, m.sites, count(int64(len(vols)), "volume"), master.path)
		return nil
	}

	// Checksums: every volume contributes its sites to each field record.
	// The volumes share one streaming buffer.
	for _, v := range vols {
		if want := min(streamBufSize, v.size); int64(len(s.buf)) < want {
			s.buf = make([]byte, want)
		}
	}
	sums := make([]siteFolder, len(field))
	for _, v := range vols {
		err := withVolume(s, fsys, v, func(vs *source) error {
			for j, rec := range field {
				f := &siteFolder{ranks: newListRanks(vs, v.lf.sitelist, v.width)}
				if err := hashSites(vs, v.lf.binaries[j].payload(), v.sites, rec.datum, f); err != nil {
					return err
				}
				sums[j].a ^= f.a
				sums[j].b ^= f.b
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for j, rec := range field {
		if err := checkSums(s, rec, sums[j].a, sums[j].b); err != nil {
			return err
		}
	}
	for i := range m.records {
		if rec := &m.records[i]; rec.kind == recordGlobal {
			if err := verifySingleRecord(s, m, rec); err != nil {
				return err
			}
		}
	}
	rep.Detail = fmt.Sprintf("lime %s, scidac partition master of a complete set of %s on %s lattice, %s, checksums ok",
		count(int64(len(self.recs)), "record"), count(int64(len(vols)), "volume"), dimsString(m.dims), count(int64(len(m.records)), "binary record"))
	return nil
}

func (lf *limeFile) isMaster() bool { return lf.role == roleMaster }

// withVolume runs fn on the open volume v: the inspected file itself or
// another volume, opened for the call. A FormatError in another volume is
// reported on the inspected file, naming the volume.
func withVolume(s *source, fsys fileSystem, v *partitionVolume, fn func(*source) error) error {
	if v.self {
		return fn(s)
	}
	f, err := fsys.open(v.path)
	if errors.Is(err, fs.ErrNotExist) {
		return errNoVolume
	}
	if err != nil {
		return fmt.Errorf("cache: %s: partition volume: %w", s.path, err)
	}
	defer f.Close()
	err = fn(&source{ctx: s.ctx, pace: s.pace, r: f, size: f.size(), path: v.path, buf: s.buf, bufs: s.bufs})
	var fe *FormatError
	if errors.As(err, &fe) && fe.Path != s.path {
		return s.fail(LIME, fe.Code, -1, "partition volume %s: %s", v.path, fe.Msg)
	}
	return err
}

// volumeSuffix splits a partition volume name NAME.volNNNN (at least four
// digits, as QIO's %04d writes them) into NAME and the volume number.
func volumeSuffix(name string) (string, int64, bool) {
	i := strings.LastIndex(name, ".vol")
	if i < 0 {
		return "", 0, false
	}
	n, ok := volumeNumber(name[i+4:])
	return name[:i], n, ok
}

// volumeNumber parses the digits of a volume number written with %04d.
func volumeNumber(d string) (int64, bool) {
	if len(d) < 4 || !allDigits(d) || len(d) > 4 && d[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseInt(d, 10, 64)
	return n, err == nil
}

// partitionSiblings returns the absolute paths of the other volumes of the
// partition set path belongs to, in volume order: NAME.volNNNN beside it
// (PARTFILE, MULTIFILE) or DIR/volNNNN/NAME (PARTFILE_DIR).
func partitionSiblings(fsys fileSystem, path string) ([]string, error) {
	abs := absPath(path)
	dir, name := filepath.Split(abs)
	dir = filepath.Clean(dir)
	type vol struct {
		n    int64
		path string
	}
	var found []vol
	if base, self, ok := volumeSuffix(name); ok {
		names, err := fsys.readDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range names {
			if b, n, ok := volumeSuffix(e); ok && b == base && n != self {
				found = append(found, vol{n, filepath.Join(dir, e)})
			}
		}
	} else if parent := filepath.Base(dir); strings.HasPrefix(parent, "vol") {
		self, ok := volumeNumber(parent[3:])
		if !ok {
			return nil, nil
		}
		top := filepath.Dir(dir)
		names, err := fsys.readDir(top)
		if err != nil {
			return nil, err
		}
		for _, e := range names {
			if !strings.HasPrefix(e, "vol") {
				continue
			}
			if n, ok := volumeNumber(e[3:]); ok && n != self {
				found = append(found, vol{n, filepath.Join(top, e, name)})
			}
		}
	}
	slices.SortFunc(found, func(a, b vol) int { return cmp.Compare(a.n, b.n) })
	paths := make([]string, len(found))
	for i, v := range found {
		paths[i] = v.path
	}
	return paths, nil
}
