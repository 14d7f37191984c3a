package daemon

import (
	"time"

	"github.com/scr-transferd/scr-transferd/transfer"
)

// The daemon's decisions, as pure functions of the transfer file's view,
// the daemon's state and the current time: what STATE and FLAG DONE to
// record, when a flush begins and ends, which entries to refuse with an
// ERROR, and what to do with the copy. sync applies them (I/O, logs).

// coreState is what the decisions need of the daemon's state.
type coreState struct {
	state        transfer.State // as recorded by the last pass
	first        bool           // the daemon's first pass over the file
	copying      bool           // a copy is under way
	flushStarted time.Time      // the flush under way began, zero when none
}

// decision is what one pass over the transfer file records under its
// lock, and what the daemon does after it.
type decision struct {
	// want is the state the file asks for; next the state to record now:
	// the current one while a copy under way must stop first, its new
	// state recorded once it has.
	want, next transfer.State
	// recordState: STATE must be written (it differs from next, or the
	// first pass records its own).
	recordState bool
	// done: FLAG DONE is set, the flush complete.
	done bool
	// clearExit: a COMMAND EXIT left from an earlier run is removed (see
	// leftoverExit).
	clearExit bool
	// flushBegan and flushEnded, when not zero, are the FLUSH record's
	// beginning and end to write.
	flushBegan, flushEnded time.Time
	// refuse are the entries whose refusal is to be recorded as ERROR.
	refuse []refused
	// first: the decision of the daemon's first pass.
	first bool
}

// refused is an entry's refusal to record: its source and the ERROR.
type refused struct {
	src, msg string
	problem  error
}

// decide is one pass's decision from the view read under the lock, the
// daemon's state and now.
func decide(v transfer.View, s coreState, now time.Time) decision {
	dec := decision{first: s.first}
	if s.first && leftoverExit(v) {
		v.Command, dec.clearExit = "", true
	}
	dec.want, dec.done = transfer.Next(v, s.state, s.copying)
	dec.next = dec.want
	if s.copying && dec.want != transfer.Running {
		// Stop the copy first; the new state is recorded once it has.
		dec.next = s.state
	}
	dec.recordState = v.State != dec.next || s.first
	// The flush record (FLUSH) is written with the state it times.
	if dec.next == transfer.Running && s.flushStarted.IsZero() {
		dec.flushBegan = now
	}
	if dec.done {
		dec.flushEnded = now
	}
	dec.refuse = refusals(v.Files)
	return dec
}

// refusals are the refused entries (Problem set) whose recorded ERROR is
// not yet the refusal's. The recorded ERROR is the folded form: compared
// with that, or a message with a double space, a tab or a line break
// would differ from it on every pass, and be logged and written again
// each time.
func refusals(files []transfer.File) []refused {
	var out []refused
	for _, f := range files {
		if f.Problem == nil {
			continue
		}
		msg := transfer.Refused(f.Problem)
		if f.Error != transfer.ErrorValue(msg) {
			out = append(out, refused{src: f.Src, msg: msg, problem: f.Problem})
		}
	}
	return out
}

// copyOnUnwritten tells, when the pass read the file whole but could not
// rewrite it (a full file system, RLIMIT_FSIZE), whether the copy still
// goes on as the file asks: its commits wait, their partial copies kept,
// until the file can be rewritten. Not on the first pass, which has
// recorded nothing yet, nor once the flush is done.
func (dec decision) copyOnUnwritten() bool {
	return dec.want == transfer.Running && !dec.done && !dec.first
}

// advance is the daemon's state after the pass: the state recorded, and
// the flush under way (begun now, ended with DONE, or no longer under way
// on STOP or EXIT: a later RUN starts the count again).
func (s coreState) advance(dec decision) coreState {
	s.state, s.first = dec.next, false
	switch {
	case !dec.flushBegan.IsZero():
		s.flushStarted = dec.flushBegan
	case dec.done || dec.next != transfer.Running:
		s.flushStarted = time.Time{}
	}
	return s
}

// copyStep is what to do with the copy after a pass.
type copyStep int

const (
	copyKeep    copyStep = iota // the copy under way goes on, or nothing to do
	copyStop                    // stop the copy under way: the state asks so
	copyAbandon                 // stop the copy under way: its entry no longer wants it (log why)
	copyPick                    // idle and running: pick what to copy next
)

// nextCopy decides what to do with the copy: state is the daemon's state
// after the pass, want the state the file asks for, and unwanted why the
// copy under way must stop because of its entries ("" if it need not).
func nextCopy(state, want transfer.State, copying bool, unwanted string) copyStep {
	switch {
	case copying && want != transfer.Running:
		return copyStop
	case copying && unwanted != "":
		return copyAbandon
	case copying:
		return copyKeep
	case state == transfer.Running:
		return copyPick
	}
	return copyKeep
}
