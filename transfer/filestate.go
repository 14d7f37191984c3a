package transfer

import (
	"fmt"
	"strings"
)

// FileState is where one FILES entry stands. It is the one notion of a
// file's state: the daemon, scr-ctl status and wait, and the metrics all
// classify entries with File.State.
type FileState int

// The states of a FILES entry.
const (
	// StatePending: bytes remain to be copied (or an empty file has not
	// been created at its destination yet); no ERROR is recorded.
	StatePending FileState = iota
	// StateComplete: WRITTEN equals SIZE (and, for an empty file, its CRC
	// is recorded), with no ERROR: every byte is durable at DESTINATION.
	StateComplete
	// StateError: the daemon recorded an ERROR. It retries the file with
	// back-off, so the state may still turn into complete.
	StateError
	// StateInvalid: the entry cannot be copied as it stands (no
	// DESTINATION, a SIZE that is not a byte count, a refused path...);
	// only a new entry from the library changes that.
	StateInvalid
)

// RefusedPrefix starts the ERROR the daemon records for an entry it
// refuses (see Refused).
const RefusedPrefix = "refused FILES entry: "

// Refused returns the ERROR the daemon records for an entry it will not
// copy as it stands, problem saying why.
func Refused(problem error) string { return RefusedPrefix + problem.Error() }

// State returns the state of f. An invalid entry (malformed, or refused
// by the daemon with a Refused ERROR) is invalid whatever else it holds;
// an ERROR outranks WRITTEN = SIZE, so that a file is reported complete
// only when nothing says otherwise.
func (f File) State() FileState {
	switch {
	case f.Problem != nil, strings.HasPrefix(f.Error, RefusedPrefix):
		return StateInvalid
	case f.Error != "":
		return StateError
	case f.Pending():
		return StatePending
	}
	return StateComplete
}

// String returns the state's name as scr-ctl status --json writes it:
// "pending", "complete", "error" or "invalid".
func (s FileState) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateComplete:
		return "complete"
	case StateError:
		return "error"
	case StateInvalid:
		return "invalid"
	}
	return fmt.Sprintf("FileState(%d)", int(s))
}

// Count returns how many files of v are in each state, indexed by
// FileState.
func (v View) Count() (n [StateInvalid + 1]int) {
	for _, f := range v.Files {
		n[f.State()]++
	}
	return n
}

// MarshalText writes the state's name, so that JSON carries "complete"
// rather than a number.
func (s FileState) MarshalText() ([]byte, error) {
	if s < StatePending || s > StateInvalid {
		return nil, fmt.Errorf("transfer: no such file state %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a name written by MarshalText.
func (s *FileState) UnmarshalText(b []byte) error {
	for c := StatePending; c <= StateInvalid; c++ {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("transfer: %q is not a file state (pending, complete, error or invalid)", b)
}
