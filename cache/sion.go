package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"strings"
)

// SIONlib container layout (file format versions 3 to 5):
//
//	META1 at 0: fixed part (1076 bytes), globalranks[n], chunksizes[n],
//	            maxchunks (i32), start_of_varheader (i64)
//	data:       maxchunks blocks, each holding one chunk per task
//	META2 at start_of_varheader: blockcount[n], blocksizes[maxchunks][n],
//	            and in file 0 of a multi-file set the global task mapping
//
// Integers are in the writer's byte order, given by the endianness word.
const (
	sionMagic       = "sion"
	sionFixedHeader = 1076 // META1 bytes before the per-task arrays
	sionMinFormat   = 3
	sionMaxFormat   = 5
	// sionMaxFiles bounds the number of physical files a container may
	// claim. The count sizes the companion list of a member other than
	// file 0, whose own content cannot bound it.
	sionMaxFiles = 1 << 16
)

// sionKeyvalMode names the key-value modes of flag1's upper half that store
// key-value records inside the chunks (the layout is unchanged).
func sionKeyvalMode(m int64) string {
	switch m {
	case 51:
		return "inline"
	case 52:
		return "meta"
	case 53:
		return "hash"
	}
	return ""
}

// sionFile is the parsed metadata of one physical SIONlib file.
type sionFile struct {
	order       binary.ByteOrder
	userBig     bool
	format      int32
	fsblk       int64
	ntasks      int64
	nfiles      int64
	filenumber  int64
	keyval      int64
	globalRanks []int64
	headerEnd   int64
	start0      int64
	globalSkip  int64
	maxChunks   int64
	sov         int64 // start_of_varheader: offset of META2
	ranges      rangeList
	chunkBytes  int64   // bytes written in all chunks
	mapping     []int32 // (file, local rank) per global rank; file 0 of a set only
	warnings    []string
}

// sionDepth says how much of a container parseSION reads.
type sionDepth int

const (
	sionLayout sionDepth = iota // META1 and the position of META2
	sionFull                    // everything, META2 included
)

func inspectSION(s *source, fsys fileSystem, rep *Report) error {
	f, err := parseSION(s, true, sionFull)
	if err != nil {
		return err
	}
	rep.Ranges = f.ranges
	rep.Warnings = f.warnings
	order := "little-endian"
	if f.order == binary.BigEndian {
		order = "big-endian"
	}
	rep.Detail = fmt.Sprintf("sion v%d %s, %s, %s, %d bytes in chunks", f.format, order, count(f.ntasks, "task"), count(f.maxChunks, "block"), f.chunkBytes)
	switch {
	case f.userBig && f.order != binary.BigEndian:
		rep.Detail += ", user data big-endian"
	case !f.userBig && f.order == binary.BigEndian:
		rep.Detail += ", user data little-endian"
	}
	if mode := sionKeyvalMode(f.keyval); mode != "" && f.format >= 5 {
		rep.Detail += ", keyval " + mode
	}
	if f.nfiles > 1 {
		rep.Detail += fmt.Sprintf(", file %d of %d", f.filenumber, f.nfiles)
		return checkSIONSet(s, fsys, f, rep)
	}
	return nil
}

// looksLikeSION reports whether a file without the SIONlib magic is a
// SIONlib container in every other respect: a valid endianness word and
// version, and a META1 that places META2 exactly where the chunk layout
// ends. Such a file is a container with a damaged magic.
func looksLikeSION(s *source) (bool, error) {
	if s.size < sionFixedHeader+16+12 {
		return false, nil
	}
	// Most files fail at the endianness word: told here without the
	// message parseSION would format for its error.
	var w [4]byte
	if err := s.readAt(w[:], 4); err != nil {
		return false, err
	}
	if !sionEndianness(w[:]) {
		return false, nil
	}
	_, err := parseSION(s, false, sionLayout)
	var fe *FormatError
	if errors.As(err, &fe) {
		return false, nil
	}
	return err == nil, err
}

// sionEndianness tells whether w, bytes 4 to 8 of a SIONlib file, is one
// of the endianness words SIONlib writes.
func sionEndianness(w []byte) bool {
	return w[0] == w[3] && w[0] <= 1 && w[1] == w[2] && w[1] <= 1
}

func parseSION(s *source, needMagic bool, depth sionDepth) (*sionFile, error) {
	if s.size < sionFixedHeader {
		return nil, s.fail(SION, "E_TRUNCATED_HEADER", -1, "file of %d bytes is shorter than the %d-byte fixed header", s.size, sionFixedHeader)
	}
	head := make([]byte, sionFixedHeader)
	if err := s.readAt(head, 0); err != nil {
		return nil, err
	}
	if needMagic && string(head[:4]) != sionMagic {
		return nil, s.fail(SION, "E_BAD_MAGIC", 0, "magic %q, want %q", head[:4], sionMagic)
	}
	f := &sionFile{}
	w := head[4:8]
	if !sionEndianness(w) {
		return nil, s.fail(SION, "E_BAD_ENDIANNESS", 4, "endianness word % x is not one of 00000000, 00010100, 01010101, 01000001", w)
	}
	f.order = binary.ByteOrder(binary.LittleEndian)
	if w[0] == 1 {
		f.order = binary.BigEndian
	}
	f.userBig = w[1] == 1
	i32 := func(off int) int64 { return int64(int32(f.order.Uint32(head[off:]))) }
	f.format = int32(i32(16))
	if f.format < sionMinFormat || f.format > sionMaxFormat {
		return nil, s.fail(SION, "E_UNSUPPORTED_VERSION", 16, "file format version %d, want %d to %d", f.format, sionMinFormat, sionMaxFormat)
	}
	f.fsblk = i32(20)
	if f.fsblk <= 0 {
		return nil, s.fail(SION, "E_BAD_FSBLKSIZE", 20, "fsblksize %d, want > 0", f.fsblk)
	}
	f.ntasks = i32(24)
	if f.ntasks < 1 {
		return nil, s.fail(SION, "E_BAD_NTASKS", 24, "ntasks %d, want >= 1", f.ntasks)
	}
	f.nfiles = i32(28)
	if f.nfiles < 1 || f.nfiles > sionMaxFiles {
		return nil, s.fail(SION, "E_BAD_NFILES", 28, "nfiles %d, want 1 to %d", f.nfiles, sionMaxFiles)
	}
	f.filenumber = i32(32)
	if (f.filenumber < 0 || f.filenumber >= f.nfiles) && (f.nfiles != 1 || f.filenumber != 1) {
		return nil, s.fail(SION, "E_BAD_FILENUMBER", 32, "filenumber %d with nfiles %d", f.filenumber, f.nfiles)
	}
	f.keyval = int64(f.order.Uint64(head[36:]) >> 32)
	n := f.ntasks
	f.headerEnd = sionFixedHeader + 12 + 16*n
	if f.headerEnd > s.size {
		return nil, s.fail(SION, "E_TRUNCATED_HEADER", -1, "META1 for %d tasks ends at %d, beyond the end of the file (%d bytes)", n, f.headerEnd, s.size)
	}

	// Per-task arrays: globalranks[n], chunksizes[n], maxchunks, start_of_varheader.
	r := newSeqReader(s, sionFixedHeader, f.headerEnd)
	f.globalRanks = make([]int64, n)
	for i := range f.globalRanks {
		b, err := r.next(8)
		if err != nil {
			return nil, err
		}
		f.globalRanks[i] = int64(f.order.Uint64(b))
	}
	starts := make([]int64, n) // chunk offset of each task within a block
	caps := make([]int64, n)
	for i := range caps {
		off := r.offset()
		b, err := r.next(8)
		if err != nil {
			return nil, err
		}
		cs := int64(f.order.Uint64(b))
		if cs < 0 {
			return nil, s.fail(SION, "E_BAD_CHUNKSIZE", off, "task %d: chunk size %d is negative", i, cs)
		}
		if f.format < 4 && cs%f.fsblk != 0 {
			if cs > math.MaxInt64-f.fsblk {
				return nil, s.fail(SION, "E_BAD_CHUNKSIZE", off, "task %d: chunk size %d overflows when rounded up to fsblksize %d", i, cs, f.fsblk)
			}
			cs += f.fsblk - cs%f.fsblk
		}
		if cs > math.MaxInt64-f.globalSkip {
			return nil, s.fail(SION, "E_BAD_CHUNKSIZE", off, "task %d: chunk sizes add up beyond 2^63", i)
		}
		caps[i] = cs
		starts[i] = f.globalSkip
		f.globalSkip += cs
	}
	b, err := r.next(12)
	if err != nil {
		return nil, err
	}
	f.maxChunks = int64(int32(f.order.Uint32(b)))
	f.sov = int64(f.order.Uint64(b[4:]))
	if f.maxChunks < 1 {
		return nil, s.fail(SION, "E_BAD_MAXCHUNKS", f.headerEnd-12, "maxchunks %d, want >= 1", f.maxChunks)
	}

	// Where META2 is and how large it is.
	sovField := f.headerEnd - 8
	if f.sov <= 0 || f.sov > s.size {
		return nil, s.fail(SION, "E_META2_OUT_OF_BOUNDS", sovField, "start_of_varheader %d outside file of %d bytes", f.sov, s.size)
	}
	if avail := (s.size - f.sov) / (8 * n); f.maxChunks+1 > avail {
		return nil, s.fail(SION, "E_META2_OUT_OF_BOUNDS", sovField,
			"META2 at %d for %d tasks and %d blocks needs %d blocks of %d bytes, the file holds %d bytes after it",
			f.sov, n, f.maxChunks, f.maxChunks+1, 8*n, s.size-f.sov)
	}
	meta2End := f.sov + 8*n*(1+f.maxChunks)
	f.start0 = roundUp(f.headerEnd, f.fsblk)
	if f.globalSkip > 0 && f.maxChunks > (math.MaxInt64-f.start0)/f.globalSkip ||
		f.sov != f.start0+f.maxChunks*f.globalSkip {
		return nil, s.fail(SION, "E_META2_OFFSET_MISMATCH", sovField,
			"start_of_varheader %d does not follow the chunk layout (first chunk at %d, %d blocks of %d bytes)",
			f.sov, f.start0, f.maxChunks, f.globalSkip)
	}
	if depth == sionLayout {
		return f, nil
	}

	// META2: blockcount[n], then blocksizes block-major.
	r = newSeqReader(s, f.sov, meta2End)
	counts := make([]int64, n)
	maxCount := int64(0)
	for i := range counts {
		off := r.offset()
		b, err := r.next(8)
		if err != nil {
			return nil, err
		}
		c := int64(f.order.Uint64(b))
		if c < 0 || c > f.maxChunks {
			return nil, s.fail(SION, "E_BAD_BLOCKCOUNT", off, "task %d: blockcount %d outside 0..maxchunks %d", i, c, f.maxChunks)
		}
		counts[i] = c
		maxCount = max(maxCount, c)
	}
	if maxCount != f.maxChunks {
		return nil, s.fail(SION, "E_BAD_BLOCKCOUNT", f.sov, "largest blockcount %d differs from maxchunks %d", maxCount, f.maxChunks)
	}
	f.ranges.add(0, f.headerEnd)
	for blk := int64(0); blk < f.maxChunks; blk++ {
		for i := int64(0); i < n; i++ {
			off := r.offset()
			b, err := r.next(8)
			if err != nil {
				return nil, err
			}
			used := int64(f.order.Uint64(b))
			if blk >= counts[i] && used != 0 {
				return nil, s.fail(SION, "E_BAD_BLOCKCOUNT", off, "task %d: block %d is beyond its blockcount %d but records %d bytes", i, blk, counts[i], used)
			}
			if used < 0 || used > caps[i] {
				return nil, s.fail(SION, "E_CHUNK_OVERFLOW", off, "task %d, block %d: %d bytes written in a chunk of %d bytes", i, blk, used, caps[i])
			}
			f.ranges.add(f.start0+blk*f.globalSkip+starts[i], used)
			f.chunkBytes += used
		}
	}
	f.ranges.add(f.sov, s.size-f.sov)

	// What follows blocksizes: the mapping table (file 0 of a set), the empty
	// mapping of the serial API, or nothing.
	end := meta2End
	rest := s.size - meta2End
	switch {
	case f.nfiles > 1 && f.filenumber == 0:
		if end, err = f.readMapping(s, meta2End); err != nil {
			return nil, err
		}
	case f.nfiles == 1 && rest >= 4:
		var b [4]byte
		if err := s.readAt(b[:], meta2End); err != nil {
			return nil, err
		}
		if f.order.Uint32(b[:]) == 0 {
			end += 4
		}
	}
	if s.size > end {
		f.warnings = append(f.warnings, fmt.Sprintf("%d bytes after the end of META2 at %d (stale data; copied with META2)", s.size-end, end))
	}
	return f, nil
}

// readMapping reads and checks the global task mapping of file 0 of a
// multi-file set, which starts at off, and returns where it ends.
func (f *sionFile) readMapping(s *source, off int64) (int64, error) {
	if s.size-off < 4 {
		return 0, s.fail(SION, "E_BAD_MAPPING", off, "file 0 of %d has no mapping table after META2", f.nfiles)
	}
	var b [4]byte
	if err := s.readAt(b[:], off); err != nil {
		return 0, err
	}
	size := int64(int32(f.order.Uint32(b[:])))
	if size < f.ntasks || size < f.nfiles || size > (s.size-off-4)/8 {
		return 0, s.fail(SION, "E_BAD_MAPPING", off,
			"mapping_size %d: want at least ntasks %d and nfiles %d, and room for it in the %d bytes after META2",
			size, f.ntasks, f.nfiles, s.size-off-4)
	}
	end := off + 4 + 8*size
	r := newSeqReader(s, off+4, end)
	f.mapping = make([]int32, 2*size)
	local := int64(0)
	for g := int64(0); g < size; g++ {
		at := r.offset()
		e, err := r.next(8)
		if err != nil {
			return 0, err
		}
		fileNo := int64(int32(f.order.Uint32(e)))
		rank := int64(int32(f.order.Uint32(e[4:])))
		if fileNo < 0 || fileNo >= f.nfiles || rank < 0 {
			return 0, s.fail(SION, "E_BAD_MAPPING", at, "global rank %d maps to file %d, local rank %d (nfiles %d)", g, fileNo, rank, f.nfiles)
		}
		if fileNo == 0 {
			if rank >= f.ntasks || f.globalRanks[rank] != g {
				return 0, s.fail(SION, "E_BAD_MAPPING", at, "global rank %d maps to local rank %d of this file, %s", g, rank, f.rankAt(rank))
			}
			local++
		}
		f.mapping[2*g], f.mapping[2*g+1] = int32(fileNo), int32(rank)
	}
	if local != f.ntasks {
		return 0, s.fail(SION, "E_BAD_MAPPING", off, "mapping covers %d of the %d tasks in this file", local, f.ntasks)
	}
	return end, nil
}

// rankAt describes local task i for messages.
func (f *sionFile) rankAt(i int64) string {
	if i < 0 || i >= int64(len(f.globalRanks)) {
		return fmt.Sprintf("which has only %d tasks", len(f.globalRanks))
	}
	return "which holds global rank " + strconv.FormatInt(f.globalRanks[i], 10)
}

// sionMemberName returns the name of physical file k of the set whose file
// 0 is base: base itself, or base with a dot and at least six digits.
func sionMemberName(base string, k int64) string {
	if k == 0 {
		return base
	}
	d := strconv.FormatInt(k, 10)
	if len(d) < 6 {
		d = strings.Repeat("0", 6-len(d)) + d
	}
	return base + "." + d
}

// checkSIONSet lists the other members of the multi-file container self
// belongs to and validates the set against the members that are present:
// every member agrees on nfiles and has the filenumber its name says, and
// file 0's mapping covers exactly the tasks of each present member.
func checkSIONSet(s *source, fsys fileSystem, self *sionFile, rep *Report) error {
	abs := absPath(s.path)
	base := abs
	if self.filenumber > 0 {
		suffix := sionMemberName("", self.filenumber)
		if !strings.HasSuffix(abs, suffix) || len(abs) == len(suffix) {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("cannot locate the other %d files of the set: the name does not end in %q", self.nfiles-1, suffix))
			return nil
		}
		base = strings.TrimSuffix(abs, suffix)
	}
	members := map[int64]*sionFile{self.filenumber: self}
	var missing []string
	for k := int64(0); k < self.nfiles; k++ {
		if k == self.filenumber {
			continue
		}
		name := sionMemberName(base, k)
		rep.Companions = append(rep.Companions, name)
		m, err := parseSIONMember(s, fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return err
		}
		members[k] = m
	}
	for k, m := range members {
		if m.nfiles != self.nfiles {
			return s.fail(SION, "E_BAD_NFILES", -1, "set member %s says nfiles %d, this file says %d", sionMemberName(base, k), m.nfiles, self.nfiles)
		}
		if m.filenumber != k {
			return s.fail(SION, "E_BAD_FILENUMBER", -1, "set member %s has filenumber %d, its name says %d", sionMemberName(base, k), m.filenumber, k)
		}
	}
	if file0 := members[0]; file0 != nil {
		covered := make([]int64, self.nfiles)
		for g := 0; g < len(file0.mapping)/2; g++ {
			k, l := int64(file0.mapping[2*g]), int64(file0.mapping[2*g+1])
			covered[k]++
			m := members[k]
			if m == nil {
				continue
			}
			if l >= m.ntasks || m.globalRanks[l] != int64(g) {
				return s.fail(SION, "E_BAD_MAPPING", -1, "mapping of %s sends global rank %d to local rank %d of %s, %s",
					sionMemberName(base, 0), g, l, sionMemberName(base, k), m.rankAt(l))
			}
		}
		for k, m := range members {
			if covered[k] != m.ntasks {
				return s.fail(SION, "E_BAD_MAPPING", -1, "mapping of %s covers %d tasks of %s, which holds %d",
					sionMemberName(base, 0), covered[k], sionMemberName(base, k), m.ntasks)
			}
		}
	}
	if len(missing) > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d of the %d files of the set are missing, first %s", len(missing), self.nfiles, missing[0]))
	}
	return nil
}

// parseSIONMember parses another physical file of a set. A corrupt member
// is reported as a FormatError on the file being inspected, naming the
// member.
func parseSIONMember(s *source, fsys fileSystem, name string) (*sionFile, error) {
	f, err := fsys.open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("cache: %s: sion set member: %w", s.path, err)
	}
	defer f.Close()
	ms := &source{ctx: s.ctx, pace: s.pace, r: f, size: f.size(), path: name, bufs: s.bufs}
	m, err := parseSION(ms, true, sionFull)
	var fe *FormatError
	if errors.As(err, &fe) {
		return nil, s.fail(SION, fe.Code, -1, "set member %s: %s", name, fe.Msg)
	}
	if err != nil {
		return nil, err
	}
	m.ranges = nil
	return m, nil
}

// roundUp rounds x up to a multiple of b (b > 0, x >= 0, no overflow for the
// header sizes it is used on).
func roundUp(x, b int64) int64 {
	if r := x % b; r != 0 {
		return x + b - r
	}
	return x
}
