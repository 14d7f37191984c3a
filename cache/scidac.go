package cache

import (
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// LIME record types written by QIO.
const (
	typePrivateFileXML   = "scidac-private-file-xml"
	typeSitelist         = "scidac-sitelist"
	typeFileXML          = "scidac-file-xml"
	typePrivateRecordXML = "scidac-private-record-xml"
	typeRecordXML        = "scidac-record-xml"
	typeILDGFormat       = "ildg-format"
	typeILDGLFN          = "ildg-data-lfn"
	typeScidacBinary     = "scidac-binary-data"
	typeILDGBinary       = "ildg-binary-data"
	typeChecksum         = "scidac-checksum"
)

const (
	// maxXMLBytes bounds the SciDAC XML records that are read into memory.
	maxXMLBytes = 1 << 20
	// maxDims bounds the number of lattice dimensions.
	maxDims = 64
)

// Record types of scidac-private-record-xml.
const (
	recordField     = 0 // one datum per lattice site
	recordGlobal    = 1 // one datum for the whole record
	recordHypercube = 2 // one datum per site of a sub-box
)

// scidacRole is what a LIME file is within SciDAC.
type scidacRole int

const (
	rolePlain  scidacRole = iota // LIME without SciDAC metadata
	roleSingle                   // a whole SciDAC file (volfmt 0)
	roleMaster                   // the partition volume holding the XML and checksums
	roleVolume                   // another partition volume: site list and binary data
)

// limeFile is a framed LIME file and what its SciDAC records say.
type limeFile struct {
	recs     []limeRecord
	messages int
	role     scidacRole
	dims     []int64
	sites    int64 // lattice volume V
	volfmt   int64
	records  []scidacRecord // single file or master: one per binary record
	sitelist *limeRecord    // master or volume
	binaries []*limeRecord  // volume: its binary records in order
}

// scidacRecord is one stored record: its metadata, payload and checksums.
type scidacRecord struct {
	msg        int
	kind       int
	datum      int64 // bytes per site
	lo, hi     []int64
	bin        *limeRecord
	suma, sumb uint32
}

func isBinaryType(t string) bool { return t == typeScidacBinary || t == typeILDGBinary }

func inspectLIME(s *source, fsys fileSystem, rep *Report) error {
	lf, err := readLIMEFile(s)
	if err != nil {
		return err
	}
	rep.Ranges = wholeFile(s.size)
	switch lf.role {
	case roleSingle:
		for i := range lf.records {
			if err := verifySingleRecord(s, lf, &lf.records[i]); err != nil {
				return err
			}
		}
		rep.Detail = fmt.Sprintf("lime %s in %s, scidac %s on %s lattice, checksums ok",
			count(int64(len(lf.recs)), "record"), count(int64(lf.messages), "message"), count(int64(len(lf.records)), "binary record"), dimsString(lf.dims))
		return nil
	case roleMaster, roleVolume:
		return inspectPartition(s, fsys, lf, rep)
	}
	rep.Detail = fmt.Sprintf("lime %s in %s, no scidac metadata", count(int64(len(lf.recs)), "record"), count(int64(lf.messages), "message"))
	for i := range lf.recs {
		if isBinaryType(lf.recs[i].typ) {
			rep.Warnings = append(rep.Warnings, "binary data without SciDAC metadata: no checksum to verify it against")
			break
		}
	}
	return nil
}

// readLIMEFile frames a LIME file, works out its SciDAC role and reads its
// SciDAC metadata. It hashes nothing.
func readLIMEFile(s *source) (*limeFile, error) {
	recs, err := frameLIME(s)
	if err != nil {
		return nil, err
	}
	lf := &limeFile{recs: recs, messages: recs[len(recs)-1].msg + 1}
	var first []*limeRecord
	var pfx, sitelist *limeRecord
	scidac := false
	for i := range recs {
		r := &recs[i]
		scidac = scidac || strings.HasPrefix(r.typ, "scidac-")
		if r.msg != 0 {
			continue
		}
		first = append(first, r)
		switch r.typ {
		case typePrivateFileXML:
			if pfx != nil {
				return nil, s.fail(LIME, "E_SCIDAC", r.off, "two %s records in the first message", r.typ)
			}
			pfx = r
		case typeSitelist:
			if sitelist != nil {
				return nil, s.fail(LIME, "E_SCIDAC", r.off, "two %s records in the first message", r.typ)
			}
			sitelist = r
		}
	}
	switch {
	case pfx != nil:
		if err := lf.readFileXML(s, pfx); err != nil {
			return nil, err
		}
		lf.role = roleSingle
		if lf.volfmt != 0 {
			lf.role = roleMaster
		}
		if (sitelist != nil) != (lf.role == roleMaster) {
			return nil, s.fail(LIME, "E_SCIDAC", pfx.off, "volfmt %d does not match the first message (site list present: %t)", lf.volfmt, sitelist != nil)
		}
		lf.sitelist = sitelist
		return lf, lf.readRecordMessages(s)
	case len(first) == 1 && sitelist != nil:
		lf.role = roleVolume
		lf.sitelist = sitelist
		for i := range recs {
			r := &recs[i]
			if r.msg == 0 {
				continue
			}
			if !isBinaryType(r.typ) || !r.mb || !r.me {
				return nil, s.fail(LIME, "E_SCIDAC", r.off, "partition volume: message %d holds a %s record, want one binary record per message", r.msg, r.typ)
			}
			lf.binaries = append(lf.binaries, r)
		}
		return lf, nil
	case scidac:
		return nil, s.fail(LIME, "E_SCIDAC", 0, "SciDAC records but no %s in the first message", typePrivateFileXML)
	}
	lf.role = rolePlain
	return lf, nil
}

// readFileXML reads the lattice dimensions and volume format.
func (lf *limeFile) readFileXML(s *source, r *limeRecord) error {
	doc, err := readXML(s, r)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return s.fail(LIME, "E_SCIDAC", r.off, "%s: %s", r.typ, fmt.Sprintf(format, args...))
	}
	dims, ok := xmlTag(doc, "dims")
	if !ok {
		return bad("no <dims>")
	}
	lf.sites = 1
	for _, f := range strings.Fields(dims) {
		d, err := strconv.ParseInt(f, 10, 64)
		if err != nil || d < 1 {
			return bad("bad lattice extent %q", f)
		}
		if len(lf.dims) == maxDims || lf.sites > math.MaxInt64/d {
			return bad("lattice %q is too large", dims)
		}
		lf.dims = append(lf.dims, d)
		lf.sites *= d
	}
	if len(lf.dims) == 0 {
		return bad("empty <dims>")
	}
	if st, ok := xmlTag(doc, "spacetime"); ok {
		if n, err := strconv.Atoi(st); err != nil || n != len(lf.dims) {
			return bad("spacetime %q but %d lattice extents", st, len(lf.dims))
		}
	}
	v, ok := xmlTag(doc, "volfmt")
	if !ok {
		v, ok = xmlTag(doc, "multifile") // SciDAC file version 1.0
	}
	if ok {
		if lf.volfmt, err = strconv.ParseInt(v, 10, 64); err != nil || lf.volfmt < 0 || lf.volfmt > 3 {
			return bad("volume format %q", v)
		}
	}
	return nil
}

// readRecordMessages reads, for a single file or a master volume, every
// message after the first that carries a record: private record XML, binary
// data and checksum, in that order.
func (lf *limeFile) readRecordMessages(s *source) error {
	recs := lf.recs
	for i := 0; i < len(recs); {
		j := i
		for j < len(recs) && recs[j].msg == recs[i].msg {
			j++
		}
		msg := recs[i:j:j]
		i = j
		if msg[0].msg == 0 {
			continue
		}
		var priv, bin, sum *limeRecord
		np, nb, ns := 0, 0, 0
		for k := range msg {
			r := &msg[k]
			switch {
			case r.typ == typePrivateRecordXML:
				priv, np = r, np+1
			case isBinaryType(r.typ):
				bin, nb = r, nb+1
			case r.typ == typeChecksum:
				sum, ns = r, ns+1
			}
		}
		if np+nb+ns == 0 {
			continue
		}
		if np != 1 || nb != 1 || ns != 1 || priv.off > bin.off || bin.off > sum.off {
			return s.fail(LIME, "E_SCIDAC", msg[0].off,
				"message %d: want %s, binary data and %s in that order, found %d, %d and %d",
				msg[0].msg, typePrivateRecordXML, typeChecksum, np, nb, ns)
		}
		rec := scidacRecord{msg: msg[0].msg, bin: bin}
		if err := lf.readRecordXML(s, priv, &rec); err != nil {
			return err
		}
		if err := readChecksumXML(s, sum, &rec); err != nil {
			return err
		}
		lf.records = append(lf.records, rec)
	}
	return nil
}

// readRecordXML reads the record type and the datum size of one record.
func (lf *limeFile) readRecordXML(s *source, r *limeRecord, rec *scidacRecord) error {
	doc, err := readXML(s, r)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return s.fail(LIME, "E_SCIDAC", r.off, "%s in message %d: %s", r.typ, r.msg, fmt.Sprintf(format, args...))
	}
	if v, ok := xmlTag(doc, "recordtype"); ok {
		if rec.kind, err = strconv.Atoi(v); err != nil || rec.kind < recordField || rec.kind > recordHypercube {
			return bad("record type %q", v)
		}
	} else if v, ok := xmlTag(doc, "globaldata"); ok { // record version 1.0
		if rec.kind, err = strconv.Atoi(v); err != nil || rec.kind < recordField || rec.kind > recordGlobal {
			return bad("globaldata %q", v)
		}
	} else {
		return bad("no <recordtype>")
	}
	rec.datum = 1
	for _, tag := range [...]string{"typesize", "datacount"} {
		v, _ := xmlTag(doc, tag)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || rec.datum > math.MaxInt64/n {
			return bad("<%s> %q", tag, v)
		}
		rec.datum *= n
	}
	if rec.kind != recordHypercube {
		return nil
	}
	for _, tag := range [...]string{"hyperlower", "hyperupper"} {
		v, _ := xmlTag(doc, tag)
		f := strings.Fields(v)
		if len(f) != len(lf.dims) {
			return bad("<%s> %q for a %d-dimensional lattice", tag, v, len(lf.dims))
		}
		c := make([]int64, len(f))
		for k := range f {
			if c[k], err = strconv.ParseInt(f[k], 10, 64); err != nil || c[k] < 0 || c[k] >= lf.dims[k] {
				return bad("<%s> %q outside the lattice", tag, v)
			}
		}
		if tag == "hyperlower" {
			rec.lo = c
		} else {
			rec.hi = c
		}
	}
	for k := range rec.lo {
		if rec.lo[k] > rec.hi[k] {
			return bad("hypercube bounds %v..%v are reversed", rec.lo, rec.hi)
		}
	}
	return nil
}

// readChecksumXML reads suma and sumb.
func readChecksumXML(s *source, r *limeRecord, rec *scidacRecord) error {
	doc, err := readXML(s, r)
	if err != nil {
		return err
	}
	for _, tag := range [...]string{"suma", "sumb"} {
		v, _ := xmlTag(doc, tag)
		n, err := strconv.ParseUint(v, 16, 32)
		if err != nil {
			return s.fail(LIME, "E_SCIDAC", r.off, "%s in message %d: <%s> %q is not a 32-bit hex number", r.typ, r.msg, tag, v)
		}
		if tag == "suma" {
			rec.suma = uint32(n)
		} else {
			rec.sumb = uint32(n)
		}
	}
	return nil
}

// readXML returns the payload of an XML record without its trailing NULs.
func readXML(s *source, r *limeRecord) (string, error) {
	if r.length > maxXMLBytes {
		return "", s.fail(LIME, "E_SCIDAC", r.off, "%s record of %d bytes is larger than the %d bytes allowed for XML", r.typ, r.length, maxXMLBytes)
	}
	b := make([]byte, r.length)
	if err := s.readAt(b, r.payload()); err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\x00"), nil
}

// xmlTag returns the trimmed text between <name> and </name>.
func xmlTag(doc, name string) (string, bool) {
	_, rest, ok := strings.Cut(doc, "<"+name+">")
	if !ok {
		return "", false
	}
	v, _, ok := strings.Cut(rest, "</"+name+">")
	return strings.TrimSpace(v), ok
}

func dimsString(dims []int64) string {
	var b strings.Builder
	for i, d := range dims {
		if i > 0 {
			b.WriteByte('x')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	return b.String()
}

// siteCount returns the number of sites a record of a single file holds.
func (lf *limeFile) siteCount(rec *scidacRecord) int64 {
	switch rec.kind {
	case recordGlobal:
		return 1
	case recordHypercube:
		n := int64(1)
		for k := range rec.lo {
			e := rec.hi[k] - rec.lo[k] + 1 // at most the lattice extent
			n *= e                         // at most the lattice volume
		}
		return n
	}
	return lf.sites
}

// checkLength reports a binary record whose length is not sites datums.
// where names the file when it is not the one inspected.
func checkLength(s *source, rec *scidacRecord, bin *limeRecord, sites int64, where string) error {
	if bin.length%rec.datum != 0 || bin.length/rec.datum != sites {
		return s.fail(LIME, "E_LENGTH", bin.off, "%s record at %d%s holds %d bytes, want %d sites of %d bytes",
			bin.typ, bin.off, where, bin.length, sites, rec.datum)
	}
	return nil
}

// verifySingleRecord checks the length and the checksums of one record of a
// single file.
func verifySingleRecord(s *source, lf *limeFile, rec *scidacRecord) error {
	sites := lf.siteCount(rec)
	if err := checkLength(s, rec, rec.bin, sites, ""); err != nil {
		return err
	}
	f := &siteFolder{}
	if rec.kind == recordHypercube {
		f.ranks = newHyperRanks(lf.dims, rec.lo, rec.hi)
	}
	if err := hashSites(s, rec.bin.payload(), sites, rec.datum, f); err != nil {
		return err
	}
	return checkSums(s, rec, f.a, f.b)
}

func checkSums(s *source, rec *scidacRecord, a, b uint32) error {
	if a != rec.suma || b != rec.sumb {
		return s.fail(LIME, "E_CHECKSUM", rec.bin.off, "%s record at %d (message %d): computed suma %x sumb %x, stored %x %x",
			rec.bin.typ, rec.bin.off, rec.msg, a, b, rec.suma, rec.sumb)
	}
	return nil
}

// rankSeq yields the lattice rank of each successive site of a record.
type rankSeq interface {
	next() (uint64, error)
}

// siteFolder folds per-site CRCs into the SciDAC sums. With no ranks the
// sites have ranks 0, 1, 2, ...
type siteFolder struct {
	ranks  rankSeq
	ra, rb int // rank mod 29 and mod 31 for sequential ranks
	a, b   uint32
	err    error
}

func (f *siteFolder) fold(c uint32) {
	if f.ranks == nil {
		f.a ^= bits.RotateLeft32(c, f.ra)
		f.b ^= bits.RotateLeft32(c, f.rb)
		if f.ra++; f.ra == 29 {
			f.ra = 0
		}
		if f.rb++; f.rb == 31 {
			f.rb = 0
		}
		return
	}
	r, err := f.ranks.next()
	if err != nil {
		if f.err == nil {
			f.err = err
		}
		return
	}
	f.a ^= bits.RotateLeft32(c, int(r%29))
	f.b ^= bits.RotateLeft32(c, int(r%31))
}

// hashSites streams n datums of datum bytes from off and folds the
// CRC-32 of each into f.
func hashSites(s *source, off, n, datum int64, f *siteFolder) error {
	var crc uint32
	fill := int64(0) // bytes of the current datum already in crc
	return s.stream(off, n*datum, func(p []byte) error {
		for len(p) > 0 {
			if fill == 0 {
				for int64(len(p)) >= datum {
					f.fold(crc32.Update(0, crc32.IEEETable, p[:datum]))
					p = p[datum:]
				}
				if len(p) == 0 {
					break
				}
			}
			k := min(datum-fill, int64(len(p)))
			crc = crc32.Update(crc, crc32.IEEETable, p[:k])
			fill += k
			p = p[k:]
			if fill == datum {
				f.fold(crc)
				crc, fill = 0, 0
			}
		}
		return f.err
	})
}

// hyperRanks yields the ranks of the sites of a box in lexicographic order,
// first coordinate fastest.
type hyperRanks struct {
	lo, hi, x, stride []int64
	started           bool
}

func newHyperRanks(dims, lo, hi []int64) *hyperRanks {
	h := &hyperRanks{lo: lo, hi: hi, x: make([]int64, len(dims)), stride: make([]int64, len(dims))}
	st := int64(1)
	for k, d := range dims {
		h.stride[k] = st
		st *= d // the product of all extents fits in int64
	}
	return h
}

func (h *hyperRanks) next() (uint64, error) {
	if !h.started {
		copy(h.x, h.lo)
		h.started = true
	} else {
		for k := range h.x {
			if h.x[k] < h.hi[k] {
				h.x[k]++
				break
			}
			h.x[k] = h.lo[k]
		}
	}
	r := int64(0)
	for k, x := range h.x {
		r += x * h.stride[k]
	}
	return uint64(r), nil
}

// listRanks yields the ranks stored in a site list record.
type listRanks struct {
	r     *seqReader
	width int
}

func newListRanks(s *source, sl *limeRecord, width int) *listRanks {
	return &listRanks{r: newSeqReader(s, sl.payload(), sl.payload()+sl.length), width: width}
}

func (l *listRanks) next() (uint64, error) {
	b, err := l.r.next(l.width)
	if err != nil {
		return 0, err
	}
	if l.width == 4 {
		return uint64(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])), nil
	}
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]), nil
}
