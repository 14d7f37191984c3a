package cache

import (
	"bytes"
	"encoding/binary"
)

// LIME framing: records laid end to end from offset 0, each a 144-byte
// big-endian header, data_length payload bytes and zero padding to a
// multiple of 8.
const (
	limeMagic      = 0x456789ab
	limeMagicBytes = "\x45\x67\x89\xab"
	limeVersion    = 1
	limeHeaderSize = 144
	limeFlagMB     = 0x80
	limeFlagME     = 0x40
)

// limeRecord is one record of a LIME file.
type limeRecord struct {
	off    int64 // offset of the header
	length int64 // data_length: payload bytes without padding
	mb, me bool
	typ    string
	msg    int // index of the message the record belongs to
}

// payload returns the offset of the record's payload.
func (r *limeRecord) payload() int64 { return r.off + limeHeaderSize }

// frameLIME walks the records of a LIME file and checks their framing: magic,
// version, flags, type string, lengths against the file size, zero padding
// and message boundaries.
func frameLIME(s *source) ([]limeRecord, error) {
	var recs []limeRecord
	var h [limeHeaderSize]byte
	var pad [8]byte
	off := int64(0)
	inMessage := false
	msg := -1
	for off < s.size {
		n := len(recs)
		if n%4096 == 4095 {
			if err := s.ctx.Err(); err != nil {
				return nil, err
			}
		}
		if s.size-off < limeHeaderSize {
			return nil, s.fail(LIME, "E_TRUNCATED_HEADER", off, "record %d: only %d of the %d header bytes present", n, s.size-off, limeHeaderSize)
		}
		if err := s.readAt(h[:], off); err != nil {
			return nil, err
		}
		if m := binary.BigEndian.Uint32(h[0:]); m != limeMagic {
			return nil, s.fail(LIME, "E_BAD_MAGIC", off, "record %d: magic %#08x, want %#08x", n, m, limeMagic)
		}
		if v := binary.BigEndian.Uint16(h[4:]); v != limeVersion {
			return nil, s.fail(LIME, "E_BAD_VERSION", off+4, "record %d: LIME version %d, want %d", n, v, limeVersion)
		}
		if h[6]&^(limeFlagMB|limeFlagME) != 0 || h[7] != 0 {
			return nil, s.fail(LIME, "E_BAD_FLAGS", off+6, "record %d: reserved flag bits set (%02x %02x)", n, h[6], h[7])
		}
		rec := limeRecord{off: off, mb: h[6]&limeFlagMB != 0, me: h[6]&limeFlagME != 0}
		nul := bytes.IndexByte(h[16:], 0)
		if nul < 0 {
			return nil, s.fail(LIME, "E_BAD_TYPE", off+16, "record %d: type string has no terminating NUL", n)
		}
		rec.typ = limeTypeName(h[16 : 16+nul])
		switch {
		case rec.mb && inMessage:
			return nil, s.fail(LIME, "E_MESSAGE", off, "record %d (%s) begins a message while message %d is still open (no ME flag)", n, rec.typ, msg)
		case !rec.mb && !inMessage:
			return nil, s.fail(LIME, "E_MESSAGE", off, "record %d (%s) has no MB flag but no message is open", n, rec.typ)
		}
		if rec.mb {
			msg++
		}
		rec.msg = msg
		inMessage = !rec.me
		length := binary.BigEndian.Uint64(h[8:])
		left := s.size - off - limeHeaderSize
		if length > uint64(left) {
			return nil, s.fail(LIME, "E_TRUNCATED_PAYLOAD", off, "record %d (%s) at %d declares %d payload bytes, only %d present", n, rec.typ, off, length, left)
		}
		rec.length = int64(length)
		end := rec.payload() + rec.length
		p := (8 - rec.length%8) % 8
		if p > s.size-end {
			return nil, s.fail(LIME, "E_MISSING_PADDING", end, "record %d (%s): file ends inside the %d padding bytes after its payload", n, rec.typ, p)
		}
		if p > 0 {
			if err := s.readAt(pad[:p], end); err != nil {
				return nil, err
			}
			for _, c := range pad[:p] {
				if c != 0 {
					return nil, s.fail(LIME, "E_BAD_PADDING", end, "record %d (%s): padding after the payload is not zero", n, rec.typ)
				}
			}
		}
		recs = append(recs, rec)
		off = end + p
	}
	if len(recs) == 0 {
		return nil, s.fail(LIME, "E_TRUNCATED_HEADER", 0, "no records")
	}
	if inMessage {
		return nil, s.fail(LIME, "E_MESSAGE", s.size, "file ends inside message %d: its last record has no ME flag", msg)
	}
	return recs, nil
}

// limeTypeName returns the type string, sharing the constant for the types
// QIO writes.
func limeTypeName(b []byte) string {
	for _, t := range [...]string{
		typePrivateFileXML, typeSitelist, typeFileXML, typePrivateRecordXML, typeRecordXML,
		typeILDGFormat, typeILDGLFN, typeScidacBinary, typeILDGBinary, typeChecksum,
	} {
		if string(b) == t {
			return t
		}
	}
	return string(b)
}

// looksLikeLIME reports whether a file without the LIME magic starts with a
// LIME record in every other respect: version 1, a message-begin flag and no
// reserved bits, a terminated type string, a payload that fits, and either
// the end of the file or another LIME header after the padding. Such a file
// is a LIME file with a damaged magic.
func looksLikeLIME(s *source) (bool, error) {
	if s.size < limeHeaderSize {
		return false, nil
	}
	h, release, err := s.view(0, limeHeaderSize)
	if err != nil {
		return false, err
	}
	defer release()
	if binary.BigEndian.Uint16(h[4:]) != limeVersion || h[6]&^(limeFlagMB|limeFlagME) != 0 || h[6]&limeFlagMB == 0 || h[7] != 0 {
		return false, nil
	}
	nul := bytes.IndexByte(h[16:], 0)
	if nul < 1 {
		return false, nil
	}
	for _, c := range h[16 : 16+nul] {
		if c < 0x21 || c > 0x7e {
			return false, nil
		}
	}
	length := binary.BigEndian.Uint64(h[8:])
	if length > uint64(s.size-limeHeaderSize) {
		return false, nil
	}
	next := limeHeaderSize + int64(length) + int64((8-length%8)%8)
	if next == s.size {
		return true, nil
	}
	if s.size-next < 4 {
		return false, nil
	}
	var m [4]byte
	if err := s.readAt(m[:], next); err != nil {
		return false, err
	}
	return string(m[:]) == limeMagicBytes, nil
}
