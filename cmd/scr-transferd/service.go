package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/internal/version"
	"github.com/scr-transferd/scr-transferd/metrics"
)

// metricsEvery bounds how often the metrics file is rewritten while the
// status changes (every second during a copy); the collector reads it far
// less often.
const metricsEvery = time.Second

// service gives the daemon its service manners outside the daemon's loop:
// sd_notify (READY=1 once the first STATE is recorded, STATUS=, WATCHDOG=1,
// STOPPING=1) and the metrics file. The loop's OnStatus only hands over
// the latest snapshot, so a slow notification socket or metrics directory
// never holds up a copy.
type service struct {
	log     *zap.Logger
	metrics *metrics.Textfile // nil without --metrics-file
	notify  func(state string) (bool, error)
	// watchdog is systemd's WATCHDOG_USEC (0 without a watchdog); beat is
	// the daemon's heartbeat, consulted before every WATCHDOG=1.
	watchdog time.Duration
	beat     *daemon.Heartbeat

	mu     sync.Mutex
	latest daemon.Status
	fresh  bool // latest not yet handled
	wake   chan struct{}

	stopOnce sync.Once
	cancel   context.CancelFunc
	finished chan struct{}

	// Owned by the service goroutine.
	metricsWritten bool      // this process wrote the metrics file at least once
	metricsAt      time.Time // when it last tried to write it, zero if never
	metricsFailing bool      // the last write failed (logged once per run of failures)

	// Owned by the service goroutine too: what loop keeps between wake-ups.
	ready bool          // READY=1 was sent
	dirty bool          // metrics to write at the next tick
	last  daemon.Status // the latest snapshot handled
}

// startService starts the service goroutine; metricsFile may be empty.
// Stop it with close.
func startService(log *zap.Logger, transferFile, metricsFile string) *service {
	vi := version.Get()
	return startServiceBuild(log, transferFile, metricsFile, metrics.Build{Version: vi.Version, Revision: vi.Revision, GoVersion: vi.GoVersion})
}

// startServiceBuild is startService with the build the metrics name.
func startServiceBuild(log *zap.Logger, transferFile, metricsFile string, build metrics.Build) *service {
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{
		log:      log,
		notify:   func(state string) (bool, error) { return sd.SdNotify(false, state) },
		wake:     make(chan struct{}, 1),
		cancel:   cancel,
		finished: make(chan struct{}),
	}
	if metricsFile != "" {
		s.metrics = metrics.NewTextfile(metricsFile, transferFile, build)
	}
	if d, err := sd.SdWatchdogEnabled(false); err != nil {
		log.Warn("systemd watchdog settings unusable", zap.Error(err))
	} else {
		s.watchdog = d
	}
	// The idle loop beats four times per watchdog period, and a beat older
	// than half the period stops the pings.
	s.beat = daemon.NewHeartbeat(s.watchdog / 4)
	go func() {
		defer close(s.finished)
		s.loop(ctx)
	}()
	return s
}

// onStatus is daemon.Wiring.OnStatus: it records the snapshot and wakes
// the service goroutine without waiting.
func (s *service) onStatus(st daemon.Status) {
	s.mu.Lock()
	s.latest, s.fresh = st, true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stopping tells systemd the service is shutting down (once).
func (s *service) stopping() {
	s.stopOnce.Do(func() { s.send("STOPPING=1") })
}

// close handles the last snapshot, removes the metrics file and stops the
// service goroutine.
func (s *service) close() {
	s.cancel()
	<-s.finished
}

// loop is the service goroutine: it hands each new snapshot to systemd,
// writes the metrics file at most every metricsEvery and pings the
// watchdog, until ctx is done; then it sends the last snapshot and removes
// the metrics file rather than rewriting it, as the instance has ended.
func (s *service) loop(ctx context.Context) {
	watchdog, stopWatchdog := ticker(s.watchdog > 0, s.watchdog/2)
	defer stopWatchdog()
	if d := s.watchdog; d > 0 {
		s.log.Info("systemd watchdog", zap.Duration("timeout", d), zap.Duration("ping_every", d/2))
	}
	// The metrics ticker runs only when there is a metrics file: an idle
	// daemon without one wakes for nothing.
	tick, stopTick := ticker(s.metrics != nil, metricsEvery)
	defer stopTick()
	stalled := "" // what stopped the pings, logged once
	defer s.removeMetrics()
	for {
		select {
		case <-ctx.Done():
			s.handle()
			return
		case <-s.wake:
			s.handle()
		case now := <-tick:
			// News, or a refresh that keeps the update timestamp fresh
			// while the daemon lives (not before the first snapshot).
			if s.ready && metrics.Due(s.dirty, s.metricsAt, now) {
				s.dirty = false
				s.writeMetrics(s.last)
			}
		case <-watchdog:
			stalled = s.pingWatchdog(stalled)
		}
	}
}

// ticker returns the channel of a ticker every d and what stops it when on,
// else a nil channel, never ready, and nothing to stop.
func ticker(on bool, d time.Duration) (<-chan time.Time, func()) {
	if !on {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// handle takes the latest snapshot, if one came since the last call, and
// sends it to systemd as STATUS=, with READY=1 the first time (the first
// snapshot comes once the daemon has recorded its first STATE in the
// transfer file, and the metrics file is written at once then); the
// metrics are then due at the next tick.
func (s *service) handle() {
	s.mu.Lock()
	st, fresh := s.latest, s.fresh
	s.fresh = false
	s.mu.Unlock()
	if !fresh {
		return
	}
	s.last, s.dirty = st, true
	status := "STATUS=" + statusLine(st)
	if !s.ready {
		s.ready = true
		s.send("READY=1\n" + status)
		s.writeMetrics(st)
		return
	}
	s.send(status)
}

// pingWatchdog sends WATCHDOG=1 only while the loop and the copy make
// progress: a daemon stuck on a lock or in the kernel must be seen.
// stalled is what stopped the pings ("" if nothing), logged once; it
// returns the new one.
func (s *service) pingWatchdog(stalled string) string {
	why := s.beat.Stalled(time.Now(), s.watchdog/2)
	if why != "" {
		if stalled == "" {
			s.log.Warn("watchdog: not pinging", zap.String("reason", why))
		}
		return why
	}
	if stalled != "" {
		s.log.Info("watchdog pings resumed")
	}
	s.send("WATCHDOG=1")
	return ""
}

func (s *service) writeMetrics(st daemon.Status) {
	if s.metrics == nil {
		return
	}
	s.metricsAt = time.Now()
	if err := s.metrics.Update(metrics.Sample{
		Updated:        s.metricsAt,
		BWLimit:        st.BWLimit,
		PercentLimit:   st.PercentLimit,
		State:          string(st.State),
		BytesCopied:    st.BytesCopied,
		BytesDurable:   st.BytesWritten,
		BytesPending:   st.BytesPending,
		Rate:           st.Rate,
		FilesInError:   st.FilesInError,
		FilesWarned:    st.FilesWarned,
		ThrottleSleeps: st.ThrottleSleeps,
		ThrottleSlept:  st.ThrottleSlept,
		BWAuto:         st.BWAuto,
		LastSuccess:    st.LastSuccess,
	}); err != nil {
		// Once per run of failures: the service writes every second
		// while the status changes, and an unwritable directory stays so.
		if !s.metricsFailing {
			s.metricsFailing = true
			s.log.Warn("cannot write the metrics file; further failures are logged at debug level "+
				"(the directory must exist and be writable by this user: see deploy/systemd/README.md, Metrics)",
				zap.String("file", s.metrics.Path()), zap.Error(err))
		} else {
			s.log.Debug("metrics file still not written", zap.String("file", s.metrics.Path()), zap.Error(err))
		}
		return
	}
	s.metricsWritten = true
	if s.metricsFailing {
		s.metricsFailing = false
		s.log.Info("metrics file written again", zap.String("file", s.metrics.Path()))
	}
}

// removeMetrics removes the metrics file when the daemon ends, so that
// node_exporter stops exporting a finished instance; only if this process
// wrote it (a second daemon refused for the same transfer file must not
// remove the first one's). A daemon that is killed leaves it behind: the
// next instance replaces it, and the Slurm epilog removes it.
func (s *service) removeMetrics() {
	if s.metrics == nil || !s.metricsWritten {
		return
	}
	if err := s.metrics.Remove(); err != nil {
		s.log.Warn("cannot remove the metrics file", zap.String("file", s.metrics.Path()), zap.Error(err))
	}
}

// send passes state to sd_notify; without NOTIFY_SOCKET it does nothing.
func (s *service) send(state string) {
	if _, err := s.notify(state); err != nil {
		s.log.Warn("sd_notify failed", zap.String("state", state), zap.Error(err))
	}
}

// statusLine is the one-line STATUS= shown by systemctl status.
func statusLine(st daemon.Status) string {
	s := string(st.State)
	if !st.LockWaitSince.IsZero() {
		s += ": waiting for the transfer-file lock held since " + st.LockWaitSince.Format(time.RFC3339)
	} else if st.File != "" {
		s += fmt.Sprintf(": copying %s at %s/s", st.File, units.IEC(st.Rate))
	} else {
		s += ": idle"
	}
	if !st.NoQuietSince.IsZero() {
		s += "; the library has left the transfer file no quiet moment since " + st.NoQuietSince.Format(time.RFC3339)
	}
	s += fmt.Sprintf("; %s pending", units.IEC(float64(st.BytesPending)))
	if st.FilesInError > 0 {
		s += "; " + units.Plural(st.FilesInError, "file", "files") + " in error"
	}
	return s
}

// absPath returns path made absolute, or path itself if that fails.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
