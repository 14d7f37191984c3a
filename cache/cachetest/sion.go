package cachetest

import (
	"encoding/binary"
	"slices"

	"github.com/scr-transferd/scr-transferd/internal/byterange"
)

// Range is a span [Off, Off+Len) of a file that holds data; cache.Range
// is the same type.
type Range = byterange.Range

// sionFixedHeader is the size of META1 before the per-task arrays.
const sionFixedHeader = 1076

// MergeRanges sorts and merges ranges; the oracle the encoders use.
func MergeRanges(in []Range) []Range {
	in = slices.Clone(in)
	slices.SortFunc(in, func(a, b Range) int { return int(a.Off - b.Off) })
	var out []Range
	for _, r := range in {
		if r.Len == 0 {
			continue
		}
		if n := len(out); n > 0 && r.Off <= out[n-1].End() {
			out[n-1].Len = max(out[n-1].End(), r.End()) - out[n-1].Off
			continue
		}
		out = append(out, r)
	}
	return out
}

// ---- SIONlib ----

// SIONTask is one task of a generated container: its global rank, the chunk
// size it requested and the bytes it wrote into each block.
type SIONTask struct {
	Rank   int64
	Chunk  int64
	Blocks []int64
}

// SIONSpec describes one physical SIONlib file to generate.
type SIONSpec struct {
	Order      binary.ByteOrder
	UserBig    bool // the writer's user data is big-endian
	Format     int32
	FSBlock    int64
	NFiles     int32
	FileNumber int32
	Tasks      []SIONTask
	Mapping    [][2]int32 // file 0 of a set
	Serial     bool       // single file with a zero mapping_size
	KeyVal     int64      // key-value mode in flag1; 0 writes 50 (none)
	Tail       []byte     // stale bytes after META2
}

// SIONPlaced is where the encoder put things, for patching fields in tests.
type SIONPlaced struct {
	HeaderEnd, Start0, GlobalSkip, SOV, Meta2End int64
	MaxChunks                                    int
}

func (sp SIONSpec) FieldOff(name string, i int) int64 {
	n := int64(len(sp.Tasks))
	switch name {
	case "globalrank":
		return sionFixedHeader + 8*int64(i)
	case "chunksize":
		return sionFixedHeader + 8*n + 8*int64(i)
	case "maxchunks":
		return sionFixedHeader + 16*n
	case "sov":
		return sionFixedHeader + 16*n + 4
	}
	panic(name)
}

// Encode writes the file the way SIONlib lays it out and returns it with
// the ranges a sparse copy must cover. Every data byte is non-zero.
func (sp SIONSpec) Encode() ([]byte, []Range, SIONPlaced) {
	l, caps, stored := sp.place()
	end := l.Meta2End
	if len(sp.Mapping) > 0 || sp.Serial {
		end += 4 + 8*int64(len(sp.Mapping))
	}
	b := make([]byte, end, end+int64(len(sp.Tail)))
	sp.putMeta1(b, l, stored)
	pos, data := sp.putBlocks(b, l, caps)
	if len(sp.Mapping) > 0 || sp.Serial {
		sp.putMapping(b[pos:])
	}
	want := append([]Range{{Off: 0, Len: l.HeaderEnd}, {Off: l.SOV, Len: end - l.SOV + int64(len(sp.Tail))}}, data...)
	return append(b, sp.Tail...), MergeRanges(want), l
}

// place lays the file out: where META1 ends, the chunks start and META2
// starts and ends, and each task's chunk capacity (its chunk size rounded
// up to FSBlock) and the chunk size META1 stores for it (the requested one
// in format 3, the capacity after).
func (sp SIONSpec) place() (l SIONPlaced, caps, stored []int64) {
	n := int64(len(sp.Tasks))
	l.HeaderEnd = 1088 + 16*n
	l.Start0 = (l.HeaderEnd + sp.FSBlock - 1) / sp.FSBlock * sp.FSBlock
	caps, stored = make([]int64, n), make([]int64, n)
	for i, tk := range sp.Tasks {
		c := (tk.Chunk + sp.FSBlock - 1) / sp.FSBlock * sp.FSBlock
		caps[i], stored[i] = c, c
		if sp.Format == 3 {
			stored[i] = tk.Chunk
		}
		l.GlobalSkip += c
		l.MaxChunks = max(l.MaxChunks, len(tk.Blocks), 1)
	}
	l.SOV = l.Start0 + int64(l.MaxChunks)*l.GlobalSkip
	l.Meta2End = l.SOV + 8*n*(1+int64(l.MaxChunks))
	return l, caps, stored
}

// putMeta1 writes the header block: magic, endianness, versions, sizes,
// the file name and each task's rank and stored chunk size.
func (sp SIONSpec) putMeta1(b []byte, l SIONPlaced, stored []int64) {
	o := sp.Order
	copy(b, "sion")
	switch {
	case o == binary.BigEndian && sp.UserBig:
		copy(b[4:], []byte{1, 1, 1, 1})
	case o == binary.BigEndian:
		copy(b[4:], []byte{1, 0, 0, 1})
	case sp.UserBig:
		copy(b[4:], []byte{0, 1, 1, 0})
	}
	o.PutUint32(b[8:], 1007)
	o.PutUint32(b[12:], 6)
	o.PutUint32(b[16:], uint32(sp.Format))
	o.PutUint32(b[20:], uint32(sp.FSBlock))
	o.PutUint32(b[24:], uint32(len(sp.Tasks)))
	o.PutUint32(b[28:], uint32(sp.NFiles))
	o.PutUint32(b[32:], uint32(sp.FileNumber))
	kv := sp.KeyVal
	if kv == 0 {
		kv = 50
	}
	o.PutUint64(b[36:], uint64(kv)<<32)
	copy(b[52:], "generated.sion")
	for i, tk := range sp.Tasks {
		o.PutUint64(b[sp.FieldOff("globalrank", i):], uint64(tk.Rank))
		o.PutUint64(b[sp.FieldOff("chunksize", i):], uint64(stored[i]))
	}
	o.PutUint32(b[sp.FieldOff("maxchunks", 0):], uint32(l.MaxChunks))
	o.PutUint64(b[sp.FieldOff("sov", 0):], uint64(l.SOV))
}

// putBlocks writes META2's block counts and bytes used per chunk, and each
// chunk's data (non-zero bytes derived from rank, block and offset). It
// returns where META2 ends and the ranges of data written.
func (sp SIONSpec) putBlocks(b []byte, l SIONPlaced, caps []int64) (int64, []Range) {
	pos := l.SOV
	put := func(v int64) { sp.Order.PutUint64(b[pos:], uint64(v)); pos += 8 }
	for _, tk := range sp.Tasks {
		put(int64(max(len(tk.Blocks), 1)))
	}
	var data []Range
	for blk := 0; blk < l.MaxChunks; blk++ {
		start := l.Start0 + int64(blk)*l.GlobalSkip
		for i, tk := range sp.Tasks {
			used := int64(0)
			if blk < len(tk.Blocks) {
				used = tk.Blocks[blk]
			}
			put(used)
			for j := int64(0); j < used; j++ {
				b[start+j] = byte(1 + (31*tk.Rank+7*int64(blk)+j)%251)
			}
			data = append(data, Range{Off: start, Len: used})
			start += caps[i]
		}
	}
	return pos, data
}

// putMapping writes the mapping of file 0 of a set into b: its length,
// then each entry's file number and local rank.
func (sp SIONSpec) putMapping(b []byte) {
	sp.Order.PutUint32(b, uint32(len(sp.Mapping)))
	for i, e := range sp.Mapping {
		sp.Order.PutUint32(b[4+8*i:], uint32(e[0]))
		sp.Order.PutUint32(b[8+8*i:], uint32(e[1]))
	}
}

// SIONMultiSpec returns a set of three physical files holding seven tasks
// (2+2+3), with the mapping in file 0.
func SIONMultiSpec(o binary.ByteOrder) []SIONSpec {
	split := [][]SIONTask{
		{{Rank: 0, Chunk: 3000, Blocks: []int64{2500}}, {Rank: 1, Chunk: 5000, Blocks: []int64{4096, 4096, 100}}},
		{{Rank: 2, Chunk: 100, Blocks: []int64{100}}, {Rank: 3, Chunk: 4096, Blocks: []int64{0}}},
		{{Rank: 4, Chunk: 9000, Blocks: []int64{9000, 1}}, {Rank: 5, Chunk: 1, Blocks: []int64{1}}, {Rank: 6, Chunk: 0, Blocks: []int64{0}}},
	}
	var mapping [][2]int32
	for f, tasks := range split {
		for l := range tasks {
			mapping = append(mapping, [2]int32{int32(f), int32(l)})
		}
	}
	specs := make([]SIONSpec, len(split))
	for f, tasks := range split {
		specs[f] = SIONSpec{Order: o, Format: 5, FSBlock: 4096, NFiles: 3, FileNumber: int32(f), Tasks: tasks}
		if f == 0 {
			specs[f].Mapping = mapping
		}
	}
	return specs
}
