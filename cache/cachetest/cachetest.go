// Package cachetest writes checkpoint files byte for byte the way each
// library lays them out: a SIONlib container whose chunks are partly filled
// (the gaps left as holes), an FTI-FF checkpoint, a SciDAC (QIO) LIME file
// with its checksums, and a plain file (Samples); and it encodes SIONlib
// containers and sets (SIONSpec), FTI-FF checkpoints over successive
// checkpoints (FTIWriter) and LIME records (LIMEEncode). scr-ctl demo
// flushes the samples; the tests of cache and scr-ctl check and damage
// them, and build their SIONlib, FTI-FF, LIME and SciDAC files with the
// same encoders, so that the samples a person sees and the files the tests trust
// come from one place.
//
// The encoders here are written from the formats' specifications and the
// libraries' sources, independently of package cache's decoders, so that a
// misreading in one is not repeated in the other.
package cachetest

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"
	"strings"
)

// Sample is one sample checkpoint.
type Sample struct {
	Name  string // file name, with the suffix the library gives it
	Kind  string // the kind package cache reports: sion, fti-ff, lime, plain
	About string // a few words on what it shows
	// Write writes the sample at path (created or truncated). The SIONlib
	// container leaves its gaps as holes.
	Write func(path string) error
}

// Samples returns one sample of every kind.
func Samples() []Sample {
	return []Sample{
		{"rank_0.sion", "sion", "4 tasks, gaps as holes", WriteSION},
		{"Ckpt1-Rank1.fti", "fti-ff", "3 chunks, MD5s", WriteFTIFF},
		{"rank_2.lime", "lime", "SciDAC checksums", WriteLIME},
		{"rank_3.ckpt", "plain", "", func(p string) error { return os.WriteFile(p, Fill(3<<20, 3), 0o644) }},
	}
}

// Fill returns n bytes of a non-zero pattern that differs with seed.
func Fill(n int, seed uint32) []byte {
	b := make([]byte, n)
	x := seed*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x) | 1
	}
	return b
}

// WriteSION writes a single-file SIONlib container (file format 5,
// little-endian, as the generic API writes it) of four tasks whose chunks
// are only partly filled, encoded by SIONSpec. Only META1, the written part
// of each chunk and META2 are written; everything else is a hole.
func WriteSION(path string) error {
	sp := SIONSpec{Order: binary.LittleEndian, Format: 5, FSBlock: 1 << 20, NFiles: 1, Tasks: []SIONTask{
		{Rank: 0, Chunk: 2 << 20, Blocks: []int64{1536 << 10, 768 << 10}},
		{Rank: 1, Chunk: 2 << 20, Blocks: []int64{2 << 20, 512 << 10}},
		{Rank: 2, Chunk: 1 << 20, Blocks: []int64{300 << 10}},
		{Rank: 3, Chunk: 2 << 20, Blocks: []int64{1 << 20, 2 << 20}},
	}}
	b, ranges, _ := sp.Encode()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	for _, r := range ranges {
		if err == nil {
			_, err = f.WriteAt(b[r.Off:r.End()], r.Off)
		}
	}
	if err == nil {
		err = f.Truncate(int64(len(b)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// LIME record header layout (big-endian): magic, version 1, the
// message-begin (MB) and message-end (ME) flags, payload length, type.
const (
	limeMagic   = 0x456789ab
	limeVersion = 1
	limeHeader  = 144
	limeMB      = 0x80
	limeME      = 0x40
)

// LIMERecord is one LIME record to encode.
type LIMERecord struct {
	Type   string
	Data   []byte
	MB, ME bool // begins, ends a message
}

// LIMEEncode lays records end to end, each a 144-byte header and its
// payload padded with zeros to 8 bytes, as LIME's writer does.
func LIMEEncode(recs []LIMERecord) []byte {
	var b []byte
	for _, r := range recs {
		h := make([]byte, limeHeader)
		binary.BigEndian.PutUint32(h, limeMagic)
		binary.BigEndian.PutUint16(h[4:], limeVersion)
		if r.MB {
			h[6] |= limeMB
		}
		if r.ME {
			h[6] |= limeME
		}
		binary.BigEndian.PutUint64(h[8:], uint64(len(r.Data)))
		copy(h[16:], r.Type)
		b = append(b, h...)
		b = append(b, r.Data...)
		b = append(b, make([]byte, (8-len(r.Data)%8)%8)...)
	}
	return b
}

// LIMEMessage marks the first record MB and the last ME, and returns recs.
func LIMEMessage(recs ...LIMERecord) []LIMERecord {
	recs[0].MB = true
	recs[len(recs)-1].ME = true
	return recs
}

// XMLRecord is a record of type typ holding an XML document with body, NUL
// terminated as QIO writes it.
func XMLRecord(typ, body string) LIMERecord {
	return LIMERecord{Type: typ, Data: append([]byte(`<?xml version="1.0" encoding="UTF-8"?>`+body), 0)}
}

// SciDACChecksums returns QIO's suma and sumb of data, datums of datum
// bytes each, the i-th at site rank ranks[i]: the CRC32 of each datum,
// rotated left by its rank modulo 29 (suma) and 31 (sumb), all XORed
// together.
func SciDACChecksums(data []byte, datum int, ranks []uint64) (suma, sumb uint32) {
	for i, r := range ranks {
		c := crc32.ChecksumIEEE(data[i*datum : (i+1)*datum])
		suma ^= bits.RotateLeft32(c, int(r%29))
		sumb ^= bits.RotateLeft32(c, int(r%31))
	}
	return suma, sumb
}

// WriteLIME writes a single SciDAC file (QIO's volfmt 0) holding one
// lattice field of 3x3 complex single-precision matrices, four per site,
// with its SciDAC checksums: the CRC32 of each site's datum, rotated by
// the site's rank modulo 29 (suma) and 31 (sumb), all XORed together.
func WriteLIME(path string) error {
	dims := []int{8, 8, 8, 16}
	const typesize, datacount = 72, 4
	sites := 1
	var dimsText strings.Builder
	for _, d := range dims {
		sites *= d
		fmt.Fprintf(&dimsText, "%d ", d)
	}
	datum := typesize * datacount
	field := Fill(sites*datum, 300)
	ranks := make([]uint64, sites)
	for r := range ranks {
		ranks[r] = uint64(r)
	}
	suma, sumb := SciDACChecksums(field, datum, ranks)
	recs := LIMEMessage(
		XMLRecord("scidac-private-file-xml", fmt.Sprintf(
			"<scidacFile><version>1.1</version><spacetime>%d</spacetime><dims>%s</dims><volfmt>0</volfmt></scidacFile>",
			len(dims), dimsText.String())),
		XMLRecord("scidac-file-xml", "<info>sample lattice</info>"),
	)
	recs = append(recs, LIMEMessage(
		XMLRecord("scidac-private-record-xml", fmt.Sprintf(
			"<scidacRecord><version>1.1</version><date>Thu Jan  1 00:00:00 1970 UTC</date><recordtype>0</recordtype>"+
				"<datatype>QDP_F3_ColorMatrix</datatype><precision>F</precision><colors>3</colors>"+
				"<typesize>%d</typesize><datacount>%d</datacount></scidacRecord>", typesize, datacount)),
		XMLRecord("scidac-record-xml", "<info>gauge field</info>"),
		LIMERecord{Type: "scidac-binary-data", Data: field},
		XMLRecord("scidac-checksum", fmt.Sprintf(
			"<scidacChecksum><version>1.0</version><suma>%x</suma><sumb>%x</sumb></scidacChecksum>", suma, sumb)),
	)...)
	return os.WriteFile(path, LIMEEncode(recs), 0o644)
}
