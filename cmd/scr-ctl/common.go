package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

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
	return t, err
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

// parseByteRate parses a byte count or rate: a decimal number with an
// optional suffix K, M, G, T (powers of 1024, as SCR's parameters; KB, KiB
// and friends mean the same), with or without "/s".
func parseByteRate(s string) (float64, error) {
	u := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "/S")
	mult := 1.0
	for _, suf := range []struct {
		s string
		m float64
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	} {
		if strings.HasSuffix(u, suf.s) {
			u, mult = strings.TrimSpace(strings.TrimSuffix(u, suf.s)), suf.m
			break
		}
	}
	v, err := strconv.ParseFloat(u, 64)
	if err != nil || !(v >= 0) || v*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a byte count such as 52428800, 50M or 1.5GiB", s)
	}
	return v * mult, nil
}

// formatBytes writes n in IEC units with three significant digits.
func formatBytes(n float64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	i := -1
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	prec := 2
	switch {
	case n >= 100:
		prec = 0
	case n >= 10:
		prec = 1
	}
	return strconv.FormatFloat(n, 'f', prec, 64) + " " + units[i:i+1] + "iB"
}

// formatDuration writes d rounded to a second, in the largest two units.
func formatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 100*3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}
