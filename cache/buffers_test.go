package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"testing"
)

// TestBuffersAreReused: checks of many plain files sharing Buffers do not
// each allocate the probe's 64 KiB, and a lent buffer, still holding the
// last file's bytes, changes no verdict: FTI-FF checkpoints whole, cut
// short and extended, and plain files of every size up to the probe's
// window, checked in turn with one Buffers, give the reports they give
// alone.
func TestBuffersAreReused(t *testing.T) {
	ctx := context.Background()
	plain := bytes.Repeat([]byte("plain checkpoint data "), 64<<10/22+1)[:64<<10]
	var bufs Buffers
	const n = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		if _, err := InspectFile(ctx, bytes.NewReader(plain), int64(len(plain)), "/c/rank0.ckpt", Options{Buffers: &bufs}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	// A check allocates a few KiB besides the probe's buffer (some 25 KiB
	// more under the race detector); without reuse, 64 KiB more.
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= 48<<10 {
		t.Fatalf("%d bytes allocated per check of a 64 KiB plain file with Buffers: the probe's buffer is not reused", per)
	}

	var inputs [][]byte
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, b := range ftiRun(o) {
			inputs = append(inputs, b, b[:len(b)-50], append(bytes.Clone(b), 0, 0, 0))
		}
	}
	for _, size := range []int{0, 1, 33, 105, 106, 107, 4096, probeBufSize - 1, probeBufSize, probeBufSize + 1} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i*7 + size)
		}
		inputs = append(inputs, b)
	}
	for i, b := range inputs {
		name := fmt.Sprintf("/c/Ckpt%d-Rank0.fti", i+1)
		want, werr := InspectFile(ctx, bytes.NewReader(b), int64(len(b)), name, Options{})
		got, gerr := InspectFile(ctx, bytes.NewReader(b), int64(len(b)), name, Options{Buffers: &bufs})
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(want, got) {
			t.Fatalf("input %d (%d bytes): with Buffers %+v, %v; alone %+v, %v", i, len(b), got, gerr, want, werr)
		}
	}
}
