// Package transfer is the protocol spoken through SCR's transfer file: the
// keys the checkpoint library and the flush daemon read and write, a typed
// view of what the file asks for, the edits each side makes, and the
// daemon's state transitions. It knows nothing of copying; the daemon
// package drives the copies.
package transfer

import (
	"fmt"
	"math"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// Keys of the transfer file (SCR's scr_keys.h), plus this project's
// extensions ERROR, CRC and WARNING under each file (and FLUSH, see
// flushrecord.go).
const (
	KeyFiles       = "FILES"
	KeyDestination = "DESTINATION"
	KeySize        = "SIZE"
	KeyWritten     = "WRITTEN"
	KeyError       = "ERROR"
	KeyCRC         = "CRC"
	KeyWarning     = "WARNING"
	KeyBW          = "BW"
	KeyPercent     = "PERCENT"
	KeyCommand     = "COMMAND"
	KeyState       = "STATE"
	KeyFlag        = "FLAG"
	FlagDone       = "DONE"
)

// Command is what the library asks the daemon to do.
type Command string

// Commands of the protocol. None means the file holds no COMMAND.
const (
	None Command = ""
	Run  Command = "RUN"
	Stop Command = "STOP"
	Exit Command = "EXIT"
)

// State is what the daemon records it is doing.
type State string

// States of the protocol.
const (
	Running State = "RUNNING"
	Stopped State = "STOPPED"
	Exiting State = "EXITING"
)

// File is one FILES entry.
type File struct {
	Src     string // absolute path in the cache: the entry's key
	Dest    string // DESTINATION
	Size    int64  // SIZE
	Written int64  // WRITTEN (0 if absent)
	Error   string // ERROR recorded by the daemon, "" if none
	CRC     uint32 // CRC recorded by the daemon, valid if HasCRC
	// Warning is what the daemon found worth an operator's attention in a
	// file it flushed (WARNING, this project's extension), "" if nothing.
	Warning string
	HasCRC  bool
	// Problem says why the entry cannot be copied as it stands (no
	// DESTINATION, a SIZE that is not a byte count...); nil if sound.
	Problem error
}

// Pending reports whether the file still has bytes to copy. An empty file
// is pending until the daemon has created it and recorded its CRC, so that
// a zero-byte checkpoint file still reaches the parallel file system. A
// WRITTEN beyond SIZE cannot describe a real copy: the file is copied again.
func (f File) Pending() bool {
	return f.Problem != nil || f.Written != f.Size || (f.Size == 0 && !f.HasCRC)
}

// View is a typed reading of a transfer file.
type View struct {
	Command    Command // RUN, STOP, EXIT or None; Unknown holds anything else
	Unknown    string  // a COMMAND value the protocol does not know
	State      State   // as recorded; "" if missing
	Done       bool    // FLAG DONE present
	BW         float64 // bytes per second in force (ReadLimits); 0 (or absent) = unlimited
	Percent    float64 // share of wall time the daemon may spend working, in percent, in force; 0 (or absent) = unlimited
	BWBad      bool    // BW is unusable: the last good value stays in force (Limits.BWKept)
	PercentBad bool    // PERCENT is unusable: the last good value stays in force
	Files      []File  // in the file's order
	// Flush is the daemon's record of the flush it runs or last ran
	// (FLUSH, this project's extension); zero if none.
	Flush Flush
	// Problems lists malformed top-level values (a BW that is not a number,
	// two COMMAND values); the entries they concern keep their zero value.
	Problems []error
}

// Read returns the view of t.
func Read(t *hashfile.Tree) View {
	var v View
	if cmd, ok := t.Value(KeyCommand); ok {
		switch c := Command(cmd); c {
		case Run, Stop, Exit:
			v.Command = c
		default:
			v.Unknown = cmd
		}
	} else if t.Has(KeyCommand) {
		v.Problems = append(v.Problems, fmt.Errorf("%s: want one value, found %d", KeyCommand, t.Get(KeyCommand).Len()))
	}
	if s, ok := t.Value(KeyState); ok {
		v.State = State(s)
	}
	v.Done = t.Lookup(KeyFlag, FlagDone) != nil
	l := readLimits(t)
	v.BW, v.BWBad, v.Percent, v.PercentBad = l.BW, l.BWKept, l.Percent, l.PercentKept
	v.Problems = append(v.Problems, l.Problems...)
	files := t.Get(KeyFiles)
	if n := files.Len(); n > 0 {
		// Sized once: growing a slice of 100,000 entries step by step
		// copies it a dozen times over.
		v.Files = make([]File, 0, n)
	}
	for src, e := range files.All() {
		v.Files = append(v.Files, readFile(src, e))
	}
	v.Flush = readFlush(t, &v.Problems)
	return v
}

func readFile(src string, e *hashfile.Tree) File {
	f := File{Src: src}
	problem := func(err error) {
		if f.Problem == nil {
			f.Problem = err
		}
	}
	if d, ok := e.Value(KeyDestination); ok && d != "" {
		f.Dest = d
	} else {
		problem(fmt.Errorf("no %s", KeyDestination))
	}
	size, ok, err := e.Uint(KeySize)
	switch {
	case err != nil:
		problem(err)
	case !ok:
		problem(fmt.Errorf("no %s", KeySize))
	case size > math.MaxInt64:
		problem(fmt.Errorf("%s %d is too large", KeySize, size))
	default:
		f.Size = int64(size)
	}
	w, _, err := e.Uint(KeyWritten)
	switch {
	case err != nil:
		problem(err)
	case w > math.MaxInt64:
		problem(fmt.Errorf("%s %d is too large", KeyWritten, w))
	default:
		f.Written = int64(w)
	}
	if msg, ok := e.Value(KeyError); ok {
		f.Error = msg
	}
	if msg, ok := e.Value(KeyWarning); ok {
		f.Warning = msg
	}
	if crc, ok, err := e.CRC(KeyCRC); ok && err == nil {
		f.CRC, f.HasCRC = crc, true
	}
	return f
}

// Totals sums the sizes and written bytes of the sound files of v.
func (v View) Totals() (size, written int64) {
	for _, f := range v.Files {
		if f.Problem == nil {
			size += f.Size
			written += min(f.Written, f.Size)
		}
	}
	return size, written
}
