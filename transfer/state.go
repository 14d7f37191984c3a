package transfer

// Next returns the state the daemon should record, given the view of the
// file, the state it is in now, and whether a copy is still under way.
// done reports that FLAG DONE must be set: RUN was asked, no file has bytes
// left, and no copy is running.
//
// EXIT always wins. RUN without DONE runs until every file is complete;
// RUN with DONE (a finished flush) and STOP rest in STOPPED. A missing or
// unknown COMMAND changes nothing, as in the original daemon.
func Next(v View, current State, busy bool) (next State, done bool) {
	switch {
	case v.Command == Exit:
		return Exiting, false
	case v.Command == Stop:
		return Stopped, false
	case v.Command == Run && v.Done:
		return Stopped, false
	case v.Command == Run:
		if !busy && !v.HasPending() {
			return Stopped, true
		}
		return Running, false
	}
	if current == "" {
		current = Stopped
	}
	return current, false
}

// HasPending reports whether any file still has bytes to copy or cannot be
// copied as it stands.
func (v View) HasPending() bool {
	for _, f := range v.Files {
		if f.Pending() {
			return true
		}
	}
	return false
}
