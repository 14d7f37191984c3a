package transfer

import (
	"strings"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

// The edits below are the only changes either side makes to a transfer
// file; both the daemon and scr-ctl apply them inside hashfile.Store.Update.

// SetState records the daemon's state.
func SetState(t *hashfile.Tree, s State) { t.SetValue(KeyState, string(s)) }

// SetDone sets or removes FLAG DONE, removing FLAG when it becomes empty.
func SetDone(t *hashfile.Tree, done bool) {
	if done {
		t.Set(KeyFlag).Set(FlagDone)
		return
	}
	if flag := t.Get(KeyFlag); flag != nil {
		flag.Unset(FlagDone)
		if flag.Len() == 0 {
			t.Unset(KeyFlag)
		}
	}
}

// SetCommand writes COMMAND; a RUN also clears FLAG DONE, as the library
// does when it starts a flush.
func SetCommand(t *hashfile.Tree, c Command) {
	t.SetValue(KeyCommand, string(c))
	if c == Run {
		SetDone(t, false)
	}
}

// SetBW writes BW in bytes per second ("%f", as the library does).
func SetBW(t *hashfile.Tree, bw float64) { t.SetFloat(KeyBW, bw) }

// SetPercent writes PERCENT ("%f", as the library does).
func SetPercent(t *hashfile.Tree, p float64) { t.SetFloat(KeyPercent, p) }

// AddFile adds (or resets) a FILES entry as the library does: DESTINATION,
// SIZE and WRITTEN 0.
func AddFile(t *hashfile.Tree, src, dest string, size int64) {
	e := hashfile.New()
	e.SetValue(KeyDestination, dest)
	e.SetUint(KeySize, uint64(size))
	e.SetUint(KeyWritten, 0)
	t.Set(KeyFiles).SetTree(src, e)
}

// entry returns the FILES entry of src if it still names dest with size,
// so a daemon never records progress on an entry the library replaced.
func entry(t *hashfile.Tree, f File) *hashfile.Tree {
	e := t.Lookup(KeyFiles, f.Src)
	if e == nil {
		return nil
	}
	if d, _ := e.Value(KeyDestination); d != f.Dest {
		return nil
	}
	if s, ok, err := e.Uint(KeySize); !ok || err != nil || int64(s) != f.Size {
		return nil
	}
	return e
}

// SetWritten records n durable bytes for f. It reports false, changing
// nothing, if the entry is gone or now names another destination or size.
func SetWritten(t *hashfile.Tree, f File, n int64) bool {
	e := entry(t, f)
	if e == nil {
		return false
	}
	e.SetUint(KeyWritten, uint64(n))
	return true
}

// SetWrittenFrom records n durable bytes for f only if the entry still
// holds prev, the WRITTEN its writer last recorded (or read). It reports
// false, changing nothing, when the entry is gone, names another destination
// or size, or holds another WRITTEN: the library reset or re-added it, and
// its value must win over older progress.
func SetWrittenFrom(t *hashfile.Tree, f File, prev, n int64) bool {
	e := entryAt(t, f, prev)
	if e == nil {
		return false
	}
	e.SetUint(KeyWritten, uint64(n))
	return true
}

// entryAt returns f's entry as entry does, if it also holds WRITTEN prev.
func entryAt(t *hashfile.Tree, f File, prev int64) *hashfile.Tree {
	e := entry(t, f)
	if e == nil {
		return nil
	}
	if w, _, err := e.Uint(KeyWritten); err != nil || int64(w) != prev {
		return nil
	}
	return e
}

// SetComplete records f as complete in one lookup of its entry: WRITTEN =
// SIZE, the CRC32 of its bytes, no ERROR, and WARNING warning ("" clears
// it, as SetWarning). As SetWrittenFrom, it changes nothing and reports
// false unless the entry still names f's DESTINATION and SIZE and holds
// WRITTEN prev. A batch records thousands of files in one update, and
// looking each entry up once for each key was most of that update's work.
func SetComplete(t *hashfile.Tree, f File, prev int64, crc uint32, warning string) bool {
	e := entryAt(t, f, prev)
	if e == nil {
		return false
	}
	e.SetUint(KeyWritten, uint64(f.Size))
	e.SetCRC(KeyCRC, crc)
	setMessage(e, KeyError, "")
	setMessage(e, KeyWarning, warning)
	return true
}

// SetCRC records the CRC32 of a completed file. It reports false if the
// entry changed, as SetWritten.
func SetCRC(t *hashfile.Tree, f File, crc uint32) bool {
	e := entry(t, f)
	if e == nil {
		return false
	}
	e.SetCRC(KeyCRC, crc)
	return true
}

// SetError records msg as the file's ERROR ("" clears it), in the form
// ErrorValue gives. It reports false if the entry is gone.
func SetError(t *hashfile.Tree, src, msg string) bool {
	e := t.Lookup(KeyFiles, src)
	if e == nil {
		return false
	}
	setMessage(e, KeyError, msg)
	return true
}

// setMessage stores msg under key of entry e in the form ErrorValue gives,
// or removes key when msg is "".
func setMessage(e *hashfile.Tree, key, msg string) {
	if msg == "" {
		e.Unset(key)
		return
	}
	e.SetValue(key, ErrorValue(msg))
}

// ErrorValue is the form in which SetError stores msg: runs of white space,
// line breaks included, folded to one space, so that the printed form stays
// one key per line. Compare a recorded ERROR with ErrorValue(msg), never
// with msg itself.
func ErrorValue(msg string) string { return strings.Join(strings.Fields(msg), " ") }
