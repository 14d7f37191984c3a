// Command tearwriter is the tear test's helper, kept out of the test binary
// so that it runs at full speed under the race detector's tests.
//
//	tearwriter write FILE        rewrite FILE in place as fast as it can
//	tearwriter check FILE WANT   the next daemon's look at FILE after a kill
//
// write rewrites a transfer file the way the daemon records progress:
// through hashfile.Store, changing only WRITTEN, to a value of another
// length each time so that the image changes size and is rewritten from
// its header on. It prints "ready" once its first rewrite is durable. The
// tear test kills it at random instants.
//
// check prints "torn" if FILE does not decode as it stands (the state a
// kill in the middle of a write leaves), or "whole"; then it updates FILE
// through hashfile.Store as the next daemon's first update does, and fails
// unless FILE then decodes holding the library's view as in WANT: COMMAND,
// BW, and every FILES entry with its DESTINATION and SIZE, with a WRITTEN
// no greater than SIZE.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "write":
		err = write(os.Args[2])
	case len(os.Args) == 4 && os.Args[1] == "check":
		err = check(os.Args[2], os.Args[3])
	default:
		err = fmt.Errorf("usage: tearwriter write FILE | tearwriter check FILE WANT")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tearwriter:", err)
		os.Exit(1)
	}
}

// write rewrites path until killed.
func write(path string) error {
	s := hashfile.NewStore(path, hashfile.Flock)
	for n := 0; ; n++ {
		if _, _, err := s.Update(raise); err != nil {
			return err
		}
		if n == 0 {
			fmt.Println("ready")
		}
	}
}

// raise sets every WRITTEN to a random value no greater than SIZE.
func raise(t *hashfile.Tree) error {
	files := t.Get(transfer.KeyFiles)
	if files == nil {
		return fmt.Errorf("no %s in the transfer file", transfer.KeyFiles)
	}
	for _, e := range files.All() {
		size, _, err := e.Uint(transfer.KeySize)
		if err != nil {
			return err
		}
		digits := 1 + rand.IntN(len(strconv.FormatUint(size, 10)))
		e.SetUint(transfer.KeyWritten, rand.Uint64N(min(size+1, pow10(digits))))
	}
	return nil
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// check reports whether path was torn, completes it as the next daemon
// does, and compares it with the library's view in want.
func check(path, want string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if _, err := hashfile.Decode(hashfile.Declared(raw)); err != nil {
		fmt.Println("torn")
	} else {
		fmt.Println("whole")
	}
	if _, _, err := hashfile.NewStore(path, hashfile.Flock).Update(func(*hashfile.Tree) error { return nil }); err != nil {
		return fmt.Errorf("the next update: %w", err)
	}
	got, err := decodeFile(path)
	if err != nil {
		return fmt.Errorf("after the next update: %w", err)
	}
	w, err := decodeFile(want)
	if err != nil {
		return err
	}
	return sameLibraryView(w, got)
}

func decodeFile(path string) (*hashfile.Tree, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// As every reader, KVTree's too, reads it: the image the header
	// declares (a kill between writing a shorter image and cutting the
	// file to it leaves a stale tail, which the next rewrite cuts off).
	t, err := hashfile.Decode(hashfile.Declared(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// sameLibraryView returns an error unless got holds what the library wrote
// in want.
func sameLibraryView(want, got *hashfile.Tree) error {
	w, g := transfer.Read(want), transfer.Read(got)
	if g.Command != w.Command || g.BW != w.BW {
		return fmt.Errorf("COMMAND %q BW %v, want %q %v", g.Command, g.BW, w.Command, w.BW)
	}
	if len(g.Files) != len(w.Files) {
		return fmt.Errorf("%d FILES entries, want %d", len(g.Files), len(w.Files))
	}
	have := make(map[string]transfer.File, len(g.Files))
	for _, f := range g.Files {
		have[f.Src] = f
	}
	for _, f := range w.Files {
		h, ok := have[f.Src]
		switch {
		case !ok:
			return fmt.Errorf("FILES entry %s lost", f.Src)
		case h.Dest != f.Dest || h.Size != f.Size:
			return fmt.Errorf("FILES entry %s names %s, %d bytes, want %s, %d", f.Src, h.Dest, h.Size, f.Dest, f.Size)
		case h.Written > h.Size || h.Problem != nil:
			return fmt.Errorf("FILES entry %s: WRITTEN %d of %d (%v)", f.Src, h.Written, h.Size, h.Problem)
		}
	}
	return nil
}
