package cachetest

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"os"
)

// FTI-FF layout (FTI 1.6, ftiff.c): the variables' containers from offset
// 0, then the chunk table (blocks of a 12-byte header, the block's record
// count and data size, and 58-byte packed records), then the 106-byte file
// meta. Integers are in the writer's byte order.
const (
	ftiBlockHeader = 12
	ftiRecordSize  = 58
	ftiMetaSize    = 106
)

// FTIVar is one protected variable of an FTI checkpoint: its id and the
// size it has at that checkpoint.
type FTIVar struct {
	ID   int32
	Size uint64
}

// ftiRec is one record of the chunk table: a container of a variable.
type ftiRec struct {
	id, cid                      int32
	has                          bool // the container holds data at this checkpoint
	dptr, chunk, container, fptr uint64
	hash                         [16]byte
}

// FTIWriter writes the FTI-FF files of successive checkpoints the way FTI
// 1.6 does: the chunk table outlives a checkpoint; a new variable, or one
// grown beyond its containers, gets a new container in a new block; a
// variable that shrank leaves its trailing containers empty (hasContent 0,
// their old MD5 kept). The zero value writes little-endian files.
type FTIWriter struct {
	Order  binary.ByteOrder
	blocks [][]*ftiRec
}

// FTIData is the content of variable id at checkpoint ckpt: never zero, so
// that a hole or a zeroed range shows.
func FTIData(ckpt, id int32, size uint64) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(1 + (uint64(ckpt)*131+uint64(id)*17+uint64(i)*7)%253)
	}
	return b
}

// Checkpoint returns the file of checkpoint ckpt holding vars (their
// content FTIData), and keeps the chunk table for the next one.
func (w *FTIWriter) Checkpoint(ckpt int32, vars []FTIVar) []byte {
	o := w.Order
	if o == nil {
		o = binary.LittleEndian
	}
	w.grow(vars)
	data := w.fill(ckpt, vars)
	file, checksum := w.appendTable(o, data)
	return append(file, ftiMeta(o, ckpt, checksum, int64(len(data)), int64(len(file))+ftiMetaSize)...)
}

// grow adds, in a new block, a container for each variable of vars that is
// new or has grown beyond its containers, holding the part beyond them.
func (w *FTIWriter) grow(vars []FTIVar) {
	have := map[int32][2]uint64{} // id -> containers, total size
	for _, blk := range w.blocks {
		for _, r := range blk {
			h := have[r.id]
			have[r.id] = [2]uint64{h[0] + 1, h[1] + r.container}
		}
	}
	var added []*ftiRec
	for _, v := range vars {
		h := have[v.ID]
		if v.Size > h[1] || h[0] == 0 {
			added = append(added, &ftiRec{id: v.ID, cid: int32(h[0]), dptr: h[1], container: v.Size - h[1]})
		}
	}
	if len(added) > 0 {
		w.blocks = append(w.blocks, added)
	}
}

// fill returns the containers of every record in table order, each filled
// with its part of its variable's content at checkpoint ckpt (zeros past
// the variable's size), and records in each where it lies in the file, how
// much it holds and that part's MD5; an empty container keeps its old MD5.
func (w *FTIWriter) fill(ckpt int32, vars []FTIVar) []byte {
	size := map[int32]uint64{}
	for _, v := range vars {
		size[v.ID] = v.Size
	}
	var data []byte
	for _, blk := range w.blocks {
		for _, r := range blk {
			r.fptr = uint64(len(data))
			content := make([]byte, r.container)
			if s := size[r.id]; s > r.dptr {
				r.chunk = min(r.container, s-r.dptr)
				r.has = true
				copy(content, FTIData(ckpt, r.id, s)[r.dptr:r.dptr+r.chunk])
				r.hash = md5.Sum(content[:r.chunk])
			} else {
				r.chunk, r.has = 0, false // keeps its old hash
			}
			data = append(data, content...)
		}
	}
	return data
}

// appendTable appends the chunk table to data: per block a header (record
// count, data size) and its packed records. It returns the result and the
// file checksum, the MD5 over the records' MD5s.
func (w *FTIWriter) appendTable(o binary.ByteOrder, data []byte) ([]byte, []byte) {
	file := data
	sums := md5.New()
	for _, blk := range w.blocks {
		h := make([]byte, ftiBlockHeader)
		o.PutUint32(h, uint32(len(blk)))
		db := uint64(0)
		for _, r := range blk {
			db += r.container
		}
		o.PutUint64(h[4:], db)
		file = append(file, h...)
		for _, r := range blk {
			file = append(file, r.encode(o)...)
			sums.Write(r.hash[:])
		}
	}
	return file, sums.Sum(nil)
}

// encode packs r as a 58-byte record of the chunk table.
func (r *ftiRec) encode(o binary.ByteOrder) []byte {
	rec := make([]byte, ftiRecordSize)
	o.PutUint32(rec, uint32(r.id))
	o.PutUint32(rec[4:], uint32(r.cid))
	if r.has {
		rec[8] = 1 // hasContent; rec[9], hasCkpt, stays 0
	}
	o.PutUint64(rec[10:], r.dptr)
	o.PutUint64(rec[18:], r.fptr)
	o.PutUint64(rec[26:], r.chunk)
	o.PutUint64(rec[34:], r.container)
	copy(rec[42:], r.hash[:])
	return rec
}

// ftiMeta encodes the file meta: the file checksum as 32 hex digits and a
// NUL, myHash, the checkpoint id, ckptSize, metaSize, dataSize, fs, maxFs,
// ptFs, the timestamp and a pad byte. myHash is the MD5 of the checksum
// (NUL included), the timestamp, ckptSize, metaSize, dataSize, fs, ptFs and
// maxFs (ptFs before maxFs, unlike their order in the meta), in the file's
// byte order. The pad is not hashed; FTI leaves whatever was in memory.
func ftiMeta(o binary.ByteOrder, ckpt int32, checksum []byte, dataSize, ckptSize int64) []byte {
	var sum [33]byte
	copy(sum[:], hex.EncodeToString(checksum))
	metaSize := ckptSize - dataSize
	const maxFs, ptFs = -1, -1
	timestamp := 0x9e3779b9 * uint32(ckpt)
	put32 := func(b []byte, v uint32) []byte {
		var x [4]byte
		o.PutUint32(x[:], v)
		return append(b, x[:]...)
	}
	put64 := func(b []byte, v int64) []byte {
		var x [8]byte
		o.PutUint64(x[:], uint64(v))
		return append(b, x[:]...)
	}
	hashed := put32(append([]byte(nil), sum[:]...), timestamp)
	for _, v := range []int64{ckptSize, metaSize, dataSize, ckptSize, ptFs, maxFs} {
		hashed = put64(hashed, v)
	}
	myHash := md5.Sum(hashed)
	meta := append(append([]byte(nil), sum[:]...), myHash[:]...)
	meta = put32(meta, uint32(ckpt))
	for _, v := range []int64{ckptSize, metaSize, dataSize, ckptSize, maxFs, ptFs} {
		meta = put64(meta, v)
	}
	meta = put32(meta, timestamp)
	return append(meta, 0xa5)
}

// WriteFTIFF writes the sample FTI-FF checkpoint: a first checkpoint of
// three variables (1 MiB, 640 KiB and 384 KiB: one block of three chunk
// records with their MD5s), then the file meta with the file checksum and
// the meta's own hash.
func WriteFTIFF(path string) error {
	var w FTIWriter
	return os.WriteFile(path, w.Checkpoint(1, []FTIVar{{ID: 1, Size: 1 << 20}, {ID: 2, Size: 640 << 10}, {ID: 3, Size: 384 << 10}}), 0o644)
}
