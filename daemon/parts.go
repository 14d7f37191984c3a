package daemon

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/rate"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// loopState is what the loop knows of the transfer file and of the work
// under way between two passes. Only the loop goroutine touches it.
type loopState struct {
	state     transfer.State         // as recorded in the file
	view      transfer.View          // last good view of the file
	refused   []error                // why each entry of view is refused (readView), nil where it is not
	recheck   recheck                // when refusals found by comparing files are worked out again (entries.go)
	job       *job                   // copy under way, nil when idle
	stale     map[string]bool        // partial copies to remove (litter.go)
	published map[string]*unrecorded // by source path: published, not recorded (unrecorded.go)
	swept     bool                   // leftover partial copies looked for at start
	memSize   int                    // transfer file size the memory limit was set for (memory.go)
	lost      <-chan error           // the instance lock lost to another process (instance.go)
	flushRun
}

// flushRun times the flush under way, for its FLUSH record and the line
// that ends it.
type flushRun struct {
	flushStarted time.Time // the flush under way began, zero when none
	flushCopied  int64     // copied when it began
}

// workerShared are the counters the copy's workers and the store's hooks
// write, from their own goroutines, and the loop reads.
type workerShared struct {
	wroteOK    atomic.Bool  // a commit rewrote the transfer file
	lockSince  atomic.Int64 // unix ns since when an access waits for the transfer-file lock; 0 if none
	quietSince atomic.Int64 // unix ns since when the library leaves the file no quiet moment (settleWait); 0 if it does
	copied     atomic.Int64 // bytes made durable by this process, for metrics
}

// fileTrouble is the last problem with the transfer file itself, logged
// once, and when to try the file again.
type fileTrouble struct {
	fileErr   string // last problem with the transfer file (fileErrKey), "" if none
	fileWrite bool   // fileErr is a failed rewrite: cleared only by a write that succeeds
	fileRetry retry  // when to try the transfer file again while fileErr is set
}

// statusShown is the status snapshot last shown (OnStatus, the handle's
// Status) and what it is computed from beyond the loop's state.
type statusShown struct {
	statusMu  sync.Mutex // guards lastShown: the lock-wait hooks report from either goroutine
	lastShown Status
	lastOK    time.Time   // when a file last completed
	meter     *rate.Meter // the rate of copied while copying; nil while idle
}

// logOnce is the log's bookkeeping: what was logged already, so that a
// line is written when something appears or changes, not at every pass.
type logOnce struct {
	problems    map[string]bool   // unknown COMMAND values logged
	topProblems map[string]bool   // top-level problems (BW, PERCENT, COMMAND values) logged
	warned      map[string]string // WARNING last logged, by source path
	throttled   uint64            // throttle pauses already logged
	autoLogged  float64           // BW auto's rate last logged (bwauto.go)
}

// hooks are what tests observe the daemon by; all nil in a real run.
type hooks struct {
	onGroup func(groupEvent, int) // told each step of a batch's groups (batch.go)
}
