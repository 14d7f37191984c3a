package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/cache/cachetest"
)

func TestPlainFiles(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"one byte", []byte{0x45}},
		{"text", []byte("sio\nnot a checkpoint\n")},
		{"zeros", make([]byte, 10000)},
		{"lime magic missing, rest random", pattern(5000, 3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := inspectBytes(t, "data.bin", tc.data)
			wantValid(t, rep, err, Plain)
			n := int64(len(tc.data))
			if rep.Size != n || rep.DataBytes != n || (n == 0) != (rep.Ranges == nil) {
				t.Fatalf("report %+v for %d bytes", rep, n)
			}
		})
	}
}

func TestKindByContentNotName(t *testing.T) {
	sionFile, _, _ := encodeSION(sionBase(binary.LittleEndian))
	dims, field := limeField(1)
	tests := []struct {
		name string
		data []byte
		kind Kind
	}{
		{"Ckpt1-Rank0.fti", sionFile, SION},
		{"run.sion", ftiRun(binary.LittleEndian)[0], FTIFF},
		{"cfg.sion", scidacSingle(dims, field), LIME},
		{"x.lime", sionFile, SION},
		{"Ckpt2-Rank3.ckpt", pattern(4096, 1), Plain},
		// A name claims a format only by its suffix (see TestNameClaims).
		{"out.sion.bak", []byte("plain"), Plain},
		{"out.lime.old", bytes.Repeat([]byte("a"), 300), Plain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := inspectBytes(t, tc.name, tc.data)
			wantValid(t, rep, err, tc.kind)
		})
	}
}

func TestIOErrors(t *testing.T) {
	dir := t.TempDir()
	rep, err := Inspect(context.Background(), filepath.Join(dir, "missing"))
	var fe *FormatError
	if rep != nil || !errors.Is(err, fs.ErrNotExist) || errors.As(err, &fe) {
		t.Fatalf("missing file: %v, %v", rep, err)
	}
	if rep, err = Inspect(context.Background(), dir); rep != nil || !errors.Is(err, errNotRegular) {
		t.Fatalf("directory: %v, %v", rep, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Inspect(context.Background(), fifo)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errNotRegular) {
			t.Fatalf("fifo: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Inspect blocked opening a FIFO")
	}
}

func TestFormatErrorText(t *testing.T) {
	e := &FormatError{Path: "/c/a.sion", Kind: SION, Code: "E_BAD_MAGIC", Offset: 0, Msg: `magic "SIOX", want "sion"`}
	if got, want := e.Error(), `/c/a.sion: sion: magic "SIOX", want "sion" (E_BAD_MAGIC)`; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// cancellingFile cancels a context after a number of reads and counts the
// reads made after that.
type cancellingFile struct {
	file
	after  int32
	reads  atomic.Int32
	cancel context.CancelFunc
}

func (f *cancellingFile) ReadAt(p []byte, off int64) (int, error) {
	if f.reads.Add(1) == f.after {
		f.cancel()
	}
	return f.file.ReadAt(p, off)
}

type cancellingFS struct {
	memFS
	f *cancellingFile
}

func (c cancellingFS) open(path string) (file, error) {
	f, err := c.memFS.open(path)
	if err != nil {
		return nil, err
	}
	c.f.file = f
	return c.f, nil
}

func TestCancelDuringHashing(t *testing.T) {
	// 8 MiB of checksummed data is read in 1 MiB pieces; cancelling after the
	// first data reads must stop the hashing at the next piece.
	dims := []int{16, 16, 16, 8}
	big := scidacField{typesize: 256, datacount: 1, kind: recordField, data: pattern(32768*256, 1), ranks: seqRanks(32768)}
	w := &cachetest.FTIWriter{Order: binary.LittleEndian}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"lime", scidacSingle(dims, big)},
		{"fti-ff", w.Checkpoint(1, []cachetest.FTIVar{{ID: 1, Size: 8 << 20}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A full run tells how many reads there are; the last eight or
			// more read the data being hashed.
			count := &cancellingFile{cancel: func() {}}
			if _, err := inspect(context.Background(), cancellingFS{memFS{"/c/f": tc.data}, count}, "/c/f", Options{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cf := &cancellingFile{after: count.reads.Load() - 5, cancel: cancel}
			fsys := cancellingFS{memFS{"/c/f": tc.data}, cf}
			_, err := inspect(ctx, fsys, "/c/f", Options{})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
			if n := cf.reads.Load(); n != cf.after {
				t.Fatalf("%d reads, %d after cancellation", n, n-cf.after)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Inspect(ctx, "/nonexistent"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before start: %v", err)
	}
}

func TestConcurrentInspect(t *testing.T) {
	dims, field := limeField(8)
	files := map[string][]byte{"a.lime": scidacSingle(dims, field, limeGlobal()), "b.fti": ftiRun(binary.BigEndian)[2]}
	b, _, _ := encodeSION(sionBase(binary.BigEndian))
	files["c.sion"] = b
	dir := writeFiles(t, t.TempDir(), files)
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := 0; i < 24; i++ {
		name := []string{"a.lime", "b.fti", "c.sion"}[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := Inspect(context.Background(), filepath.Join(dir, name))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestRangeList(t *testing.T) {
	tests := []struct {
		in   [][2]int64
		want []Range
	}{
		{nil, nil},
		{[][2]int64{{0, 0}, {5, 0}}, nil},
		{[][2]int64{{0, 10}, {10, 5}}, []Range{{Off: 0, Len: 15}}},
		{[][2]int64{{0, 10}, {11, 5}}, []Range{{Off: 0, Len: 10}, {Off: 11, Len: 5}}},
		{[][2]int64{{0, 10}, {4, 2}, {9, 3}}, []Range{{Off: 0, Len: 12}}},
		{[][2]int64{{3, 1}, {3, 0}, {100, 1}}, []Range{{Off: 3, Len: 1}, {Off: 100, Len: 1}}},
	}
	for _, tc := range tests {
		var l rangeList
		for _, r := range tc.in {
			l.add(r[0], r[1])
		}
		if !slices.Equal([]Range(l), tc.want) {
			t.Errorf("%v: got %v, want %v", tc.in, l, tc.want)
		}
	}
}

func TestMappedStream(t *testing.T) {
	data := pattern(4<<20, 7)
	path := filepath.Join(writeFiles(t, t.TempDir(), map[string][]byte{"f": data}), "f")
	open := func(t *testing.T, ctx context.Context) *source {
		f, err := osFS{}.open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return &source{ctx: ctx, r: f, size: f.size(), path: path}
	}
	t.Run("same bytes as read", func(t *testing.T) {
		s := open(t, context.Background())
		var got []byte
		off := int64(12345) // not page aligned
		if err := s.stream(off, int64(len(data))-off-7, func(p []byte) error { got = append(got, p...); return nil }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data[off:len(data)-7]) {
			t.Fatal("mapped bytes differ from the file")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := open(t, ctx)
		pieces := 0
		err := s.stream(0, int64(len(data)), func([]byte) error { pieces++; cancel(); return nil })
		if !errors.Is(err, context.Canceled) || pieces != 1 {
			t.Fatalf("err %v after %d pieces", err, pieces)
		}
	})
	t.Run("file shrinks while hashed", func(t *testing.T) {
		s := open(t, context.Background())
		sum := 0
		err := s.stream(0, int64(len(data)), func(p []byte) error {
			if err := os.Truncate(path, 4096); err != nil {
				t.Fatal(err)
			}
			for _, c := range p {
				sum += int(c)
			}
			return nil
		})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err %v, want a read error", err)
		}
		t.Log(err)
	})
}

func TestPaceIsCalledWhileHashing(t *testing.T) {
	w := &cachetest.FTIWriter{Order: binary.LittleEndian}
	fti := w.Checkpoint(1, []cachetest.FTIVar{{ID: 1, Size: 3 << 20}, {ID: 2, Size: 2 << 20}})
	dims, field := limeField(1)
	files := map[string][]byte{"Ckpt1-Rank0.fti": fti, "f.lime": scidacSingle(dims, field)}
	dir := writeFiles(t, t.TempDir(), files)
	for name := range files {
		calls := 0
		rep, err := InspectWith(context.Background(), filepath.Join(dir, name), Options{Pace: func(context.Context) error {
			calls++
			return nil
		}})
		if err != nil || rep.Kind == Plain {
			t.Fatalf("%s: %v %v", name, rep, err)
		}
		if calls == 0 {
			t.Fatalf("%s: Pace never called while hashing", name)
		}
		stop := errors.New("over budget")
		if _, err := InspectWith(context.Background(), filepath.Join(dir, name), Options{Pace: func(context.Context) error { return stop }}); !errors.Is(err, stop) {
			t.Fatalf("%s: an error from Pace must stop the inspection, got %v", name, err)
		}
	}
}
