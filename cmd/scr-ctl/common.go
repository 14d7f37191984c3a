package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/term"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// lockingFlag adds --locking, which every command reading a hash file has.
func lockingFlag(fs *flag.FlagSet) *string {
	return fs.String("locking", "flock", "file lock: flock or fcntl (as KVTree was built for the SCR library)")
}

// openStore returns the store of the hash file at path with the locking
// named by locking (a usage error if unknown).
func openStore(path, locking string) (*hashfile.Store, error) {
	lk, err := hashfile.ParseLocking(locking)
	if err != nil {
		return nil, usageError{"--locking: " + err.Error()}
	}
	return hashfile.NewStore(path, lk), nil
}

// readExisting reads a transfer file that must already exist, saying so
// plainly when it does not.
func readExisting(s *hashfile.Store) (*hashfile.Tree, error) {
	t, err := s.Read()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such transfer file", s.Path())
	}
	return t, explainCorrupt(err, s.Path())
}

// explainCorrupt adds to an error that says the file at path does not
// decode (hashfile.ErrFormat) what to do about it; other errors, and nil,
// are returned as they are.
func explainCorrupt(err error, path string) error {
	if !errors.Is(err, hashfile.ErrFormat) {
		return err
	}
	return fmt.Errorf("%w\n  the file is corrupt: 'scr-ctl repair --dry-run %s' says what can be kept, "+
		"'scr-ctl repair %s' keeps it, saves the corrupt file beside it and says what it dropped", err, path, path)
}

// terminalOf returns the terminal test for w: whether it is a terminal, and
// its size in columns and rows (0 when unknown).
func terminalOf(w io.Writer) func() (bool, int, int) {
	return func() (bool, int, int) {
		f, ok := w.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return false, 0, 0
		}
		cols, rows, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return true, 0, 0
		}
		return true, cols, rows
	}
}
