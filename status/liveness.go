package status

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Liveness says whether a daemon serves a transfer file, and how that was
// found out.
type Liveness struct {
	Serving bool
	PID     int    // the daemon's PID when known, else 0
	Reason  string // what the answer rests on, for messages
	// Since is when the serving daemon took its instance lock: the lock
	// file's modification time, which the daemon sets by writing its PID
	// into it when it starts. Zero when not serving or not known (no lock
	// file, or one that cannot be probed).
	Since time.Time
}

// Probe tells whether a daemon serves transferFile, whose latest reading is
// v. The daemon's instance lock (internal/instance) is the truth: held
// means served, present but free means the daemon that held it has ended,
// however it ended. Where no lock file exists (a daemon that does not take
// it, or none ever started), or it cannot be probed (another user's, not
// readable), the reading decides: no STATE means no daemon
// has answered, STATE EXITING that it has left; any other STATE is taken
// as a daemon at work, which cannot tell a daemon killed without a chance
// to record EXITING. A daemon that has recorded EXITING is leaving even
// while it still holds its lock.
func Probe(transferFile string, v transfer.View) (Liveness, error) {
	lock := instance.LockPath(transferFile)
	_, err := os.Lstat(lock)
	note := ""
	switch {
	case err == nil:
		pid, held, err := instance.Holder(transferFile)
		if err != nil {
			// A lock file this user cannot open or probe (another
			// user's daemon): the reading has to decide.
			note = fmt.Sprintf("the lock cannot be probed: %v", err)
			break
		}
		switch {
		case !held:
			return Liveness{Reason: fmt.Sprintf("no daemon holds its lock %s (the daemon that served it has ended)", lock)}, nil
		case v.State == transfer.Exiting:
			return Liveness{PID: pid, Reason: fmt.Sprintf("the daemon (PID %d) recorded STATE EXITING: it is leaving", pid)}, nil
		}
		lv := Liveness{Serving: true, PID: pid, Reason: fmt.Sprintf("served by PID %d (lock %s)", pid, lock)}
		if fi, err := os.Lstat(lock); err == nil {
			lv.Since = fi.ModTime()
		}
		return lv, nil
	case !errors.Is(err, fs.ErrNotExist):
		note = fmt.Sprintf("the lock cannot be probed: %v", err)
	default:
		note = "no lock file " + lock
	}
	switch v.State {
	case "":
		return Liveness{Reason: "no daemon has recorded a STATE (" + note + "); is scr-transferd running on this file?"}, nil
	case transfer.Exiting:
		return Liveness{Reason: "STATE EXITING: the daemon has exited (" + note + ")"}, nil
	}
	return Liveness{Serving: true, Reason: fmt.Sprintf("STATE %s recorded (%s)", v.State, note)}, nil
}
