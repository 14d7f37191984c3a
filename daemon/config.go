// Package daemon is scr-transferd's run loop: it watches the transfer file,
// obeys the library's COMMAND, records STATE, and drives the copy engine
// over every file with bytes left, one at a time, recording WRITTEN as bytes
// become durable and ERROR when a file cannot be flushed.
package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Verify selects when checkpoint integrity is checked.
type Verify int

const (
	// VerifyOff copies without looking at the checkpoint's format.
	VerifyOff Verify = iota
	// VerifyBefore identifies and checks the file before copying it, and
	// copies only the data ranges of a SIONlib container.
	VerifyBefore
	// VerifyAfter re-reads the durable copy and compares its CRC32 with
	// the CRC32 of what was read from the source, before publishing it.
	VerifyAfter
	// VerifyBoth does both.
	VerifyBoth
)

// ParseVerify accepts off, before, after or both.
func ParseVerify(s string) (Verify, error) {
	switch s {
	case "off":
		return VerifyOff, nil
	case "before":
		return VerifyBefore, nil
	case "after":
		return VerifyAfter, nil
	case "both":
		return VerifyBoth, nil
	}
	return VerifyOff, fmt.Errorf("unknown verify mode %q: want off, before, after or both", s)
}

func (v Verify) String() string {
	return [...]string{"off", "before", "after", "both"}[v]
}

func (v Verify) before() bool { return v == VerifyBefore || v == VerifyBoth }
func (v Verify) after() bool  { return v == VerifyAfter || v == VerifyBoth }

// Config is how a daemon runs: the settings a site configures, and the
// wiring that connects the daemon to the process that runs it.
type Config struct {
	Settings
	Wiring
}

// Settings are what a site configures: the transfer file, how it is
// watched and locked, how files are copied, retried and trusted. They are
// values only, set from the command line and the environment.
type Settings struct {
	TransferFile string
	Locking      hashfile.Locking
	// Protect names files, beyond the transfer file and its sidecars
	// (lock, journal), that no DESTINATION may name: the metrics file.
	Protect []string

	// Poll is how often the transfer file's metadata is checked for a
	// change that file-system notification may have missed, only on the
	// file systems where it may (network, cluster and FUSE file systems,
	// see filewatch.Polls); Reread is how often it is read regardless, as
	// the original daemon did every SCR_TRANSFER_SECS.
	Poll, Reread time.Duration

	Flush  flush.Options
	Verify Verify
	// BWAuto sets the copy rate from the latency of the copy's writes and
	// commits to the destination (flush/autobw): it yields when others
	// queue there. BW, when set, is its ceiling; PERCENT still applies.
	BWAuto bool
	// Streams is how many small files of a batch are copied at once
	// (default DefaultStreams). They share the throttle, so BW and PERCENT
	// hold for the daemon as a whole.
	Streams int

	// RetryMin and RetryMax bound the back-off between attempts on a file
	// in error: it doubles from RetryMin up to RetryMax, and each wait is
	// drawn at random between half and all of it (see retryPolicy).
	RetryMin, RetryMax time.Duration

	// ProgressEvery is how often a progress line is logged for the file
	// being copied; 0 logs none.
	ProgressEvery time.Duration

	// Insecure accepts a transfer file or control directory that another
	// user owns or that group or other may write.
	Insecure bool
	// AllowSrc and AllowDest, when not empty, confine the files the daemon
	// reads and writes to these directory prefixes.
	AllowSrc, AllowDest []string

	// FcntlSettle is, with fcntl locking, the longest wait after a change
	// the daemon did not make for the library's read that follows, before
	// the daemon takes the lock (hashfile.Store.Settle): SCR up to 1.2 takes
	// its fcntl lock with F_SETLK, without waiting, and fails outright when
	// the daemon holds it.
	FcntlSettle time.Duration

	// CreateDir creates the transfer file's directory (0700) when it does
	// not exist. Without it a missing directory is refused: it is most
	// often a mistyped path, and a daemon serving a file nobody writes
	// would wait forever without a word.
	CreateDir bool

	// StrictModes refuses a group-writable transfer file or control
	// directory too (by default they are accepted, as the library creates
	// them under umask 002).
	StrictModes bool
}

// Wiring connects a daemon to the process that runs it: where it logs,
// whom it tells of its status, what its watchdog reads. All are optional.
type Wiring struct {
	// Heartbeat, if set, records the progress of the loop and the copy for
	// a watchdog; its period is how often an idle loop beats.
	Heartbeat *Heartbeat

	// Log receives the daemon's log lines; nil discards them.
	Log *zap.Logger

	// OnStatus, if set, is called with a snapshot whenever the state, the
	// file being copied or its progress changes: from the daemon's loop,
	// or from whichever goroutine waits for the transfer file's lock. It
	// must not block.
	OnStatus func(Status)
}

// Status is a snapshot of what the daemon is doing, for sd_notify and
// metrics.
type Status struct {
	State          transfer.State
	File           string  // source being copied, "" when idle
	Rate           float64 // bytes/s made durable, a moving average over the commits (internal/rate); 0 when idle
	BytesCopied    int64   // bytes this process made durable since it started (monotonic)
	BytesWritten   int64   // durable bytes of all files in the transfer file
	BytesPending   int64   // bytes still to copy
	FilesInError   int
	FilesWarned    int // files flushed with a WARNING recorded
	ThrottleSleeps uint64
	ThrottleSlept  time.Duration
	BWAuto         float64   // BW auto's rate in force, bytes/s averaged over a few seconds; 0 when off
	LastSuccess    time.Time // when a file last completed; zero if never
	LockWaitSince  time.Time // since when the daemon waits for the transfer-file lock; zero if it does not
	BWLimit        float64   // BW in force (transfer.ReadLimits, the last good value of an unusable one); 0: none
	PercentLimit   float64   // PERCENT in force; 0 or 100: none
	NoQuietSince   time.Time // fcntl locking: since when the library leaves the transfer file no quiet moment; zero if it does
}

// DefaultStreams is Config.Streams when unset.
const DefaultStreams = 4

// setDefaults fills in the settings left unset, and a logger that
// discards if none is wired.
func (c *Config) setDefaults() {
	c.Settings.setDefaults()
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
}

// setDefaults fills in the settings left unset.
func (c *Settings) setDefaults() {
	// The daemon sizes its batches by the copy's options: as a Copier
	// would take them, not as given (a zero SyncBytes batched nothing).
	c.Flush = c.Flush.WithDefaults()
	if c.Streams <= 0 {
		c.Streams = DefaultStreams
	}
	if c.Poll <= 0 {
		c.Poll = time.Second
	}
	if c.Reread <= 0 {
		c.Reread = 60 * time.Second
	}
	if c.RetryMin <= 0 {
		c.RetryMin = time.Second
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(c.RetryMin, time.Minute)
	}
}

// ErrNoControlDir is the error of a transfer file whose directory does not
// exist, without Config.CreateDir.
var ErrNoControlDir = errors.New("the transfer file's directory does not exist")

// controlDir makes sure dir, the transfer file's directory, exists:
// creating it (0700) if create, refusing it with ErrNoControlDir if not.
func controlDir(dir string, create bool) error {
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating the transfer file's directory %s: %w", dir, err)
		}
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s (a mistyped path? the SCR library's control directory, SCR_CNTL_BASE, must exist, "+
			"or pass --create-dir to create it)", ErrNoControlDir, dir)
	case err != nil:
		return fmt.Errorf("the transfer file's directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("the transfer file's directory %s is not a directory", dir)
	}
	return nil
}
