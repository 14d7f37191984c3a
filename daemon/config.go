// Package daemon is scr-transferd's run loop: it watches the transfer file,
// obeys the library's COMMAND, records STATE, and drives the copy engine
// over every file with bytes left, one at a time, recording WRITTEN as bytes
// become durable and ERROR when a file cannot be flushed.
package daemon

import (
	"fmt"
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

// Config is how a daemon runs.
type Config struct {
	TransferFile string
	Locking      hashfile.Locking

	// Poll is how often the transfer file's metadata is checked for a
	// change that file-system notification may have missed, only on the
	// file systems where it may (network, cluster and FUSE file systems,
	// see filewatch.Polls); Reread is how often it is read regardless, as
	// the original daemon did every SCR_TRANSFER_SECS.
	Poll, Reread time.Duration

	Flush  flush.Options
	Verify Verify
	// Streams is how many small files of a batch are copied at once
	// (default DefaultStreams). They share the throttle, so BW and PERCENT
	// hold for the daemon as a whole.
	Streams int

	// RetryMin and RetryMax bound the back-off between attempts on a file
	// in error: it doubles from RetryMin up to RetryMax, and each wait is
	// drawn at random between half and all of it (see jittered).
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

	// StrictModes refuses a group-writable transfer file or control
	// directory too (by default they are accepted, as the library creates
	// them under umask 002).
	StrictModes bool

	// Heartbeat, if set, records the progress of the loop and the copy for
	// a watchdog; its period is how often an idle loop beats.
	Heartbeat *Heartbeat

	Log *zap.Logger

	// OnStatus, if set, is called from the daemon's loop with a snapshot
	// whenever the state, the file being copied or its progress changes.
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
	LastSuccess    time.Time // when a file last completed; zero if never
	LockWaitSince  time.Time // since when the daemon waits for the transfer-file lock; zero if it does not
	NoQuietSince   time.Time // fcntl locking: since when the library leaves the transfer file no quiet moment; zero if it does
}

// DefaultStreams is Config.Streams when unset.
const DefaultStreams = 4

func (c *Config) setDefaults() {
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
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
}
