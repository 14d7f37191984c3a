// Package metrics publishes scr-transferd's figures for Prometheus through
// node_exporter's textfile collector: a file in the text exposition format
// that is replaced atomically (written beside it under a temporary name,
// then renamed), so the collector never reads half a file. The daemon needs
// no listening socket for this, which suits compute nodes.
package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Sample is what the daemon reports at one moment.
type Sample struct {
	State          string        // RUNNING, STOPPED or EXITING
	BytesCopied    int64         // bytes this daemon process made durable since it started (monotonic)
	BytesDurable   int64         // bytes durable at their destinations, over the files in the transfer file
	BytesPending   int64         // bytes still to copy
	Rate           float64       // bytes/s of the copy under way (internal/rate: the same estimate as scr-ctl status), 0 when idle
	FilesInError   int           // files with an ERROR or a malformed entry
	FilesWarned    int           // files flushed with a WARNING recorded
	ThrottleSleeps uint64        // pauses imposed by BW or PERCENT since the start
	ThrottleSlept  time.Duration // time spent in those pauses
	BWAuto         float64       // BW auto's rate in force, bytes/s averaged; 0 when off (no series)
	LastSuccess    time.Time     // when a file last completed; zero if never
	BWLimit        float64       // BW in force, bytes per second; 0: no limit
	PercentLimit   float64       // PERCENT in force; 0 (or 100): no limit
	// Updated is when the daemon wrote this sample: an alert compares it
	// with time() to tell a dead or hung daemon (whose last file stays,
	// claiming its last state) from a live one.
	Updated time.Time
}

// Build labels scr_transferd_build_info.
type Build struct {
	Version, Revision, GoVersion string
}

// States are the values of the state label; the one the daemon is in has
// the value 1, the others 0, so that every state is always present.
var states = [...]string{"RUNNING", "STOPPED", "EXITING"}

// Textfile renders samples and writes them to a textfile-collector file;
// use it from one goroutine.
type Textfile struct {
	path   string
	labels string // rendered label pairs shared by every series
	build  string // the build's label pairs
	buf    bytes.Buffer
}

// NewTextfile returns a Textfile writing to path (which should end in
// ".prom" for the collector to read it), labelling every series with the
// transfer file it reports on, and build_info with b.
func NewTextfile(path, transferFile string, b Build) *Textfile {
	return &Textfile{path: path, labels: `transfer_file="` + escapeLabel(transferFile) + `"`,
		build: `version="` + escapeLabel(b.Version) + `",revision="` + escapeLabel(b.Revision) +
			`",goversion="` + escapeLabel(b.GoVersion) + `"`}
}

// Path returns the file written.
func (t *Textfile) Path() string { return t.path }

// Render returns the exposition of s; the slice is valid until the next call.
func (t *Textfile) Render(s Sample) []byte {
	b := &t.buf
	b.Reset()
	family := func(name, typ, help string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	series := func(name, extra string, v float64) {
		labels := t.labels
		if extra != "" {
			labels += "," + extra
		}
		fmt.Fprintf(b, "%s{%s} %s\n", name, labels, strconv.FormatFloat(v, 'g', -1, 64))
	}
	family("scr_transferd_bytes_written_total", "counter", "Bytes this daemon process made durable at their destinations.")
	series("scr_transferd_bytes_written_total", "", float64(s.BytesCopied))
	family("scr_transferd_bytes_durable", "gauge", "Bytes durable at their destinations, summed over the files listed in the transfer file.")
	series("scr_transferd_bytes_durable", "", float64(s.BytesDurable))
	family("scr_transferd_bytes_pending", "gauge", "Bytes of the files listed in the transfer file still to be copied.")
	series("scr_transferd_bytes_pending", "", float64(s.BytesPending))
	family("scr_transferd_rate_bytes_per_second", "gauge", "Copy rate in bytes made durable per second, a moving average over the commits (time constant 10 s); 0 when idle.")
	series("scr_transferd_rate_bytes_per_second", "", s.Rate)
	family("scr_transferd_state", "gauge", "The daemon's STATE: 1 for the state it is in, 0 for the others.")
	for _, st := range states {
		v := 0.0
		if st == s.State {
			v = 1
		}
		series("scr_transferd_state", `state="`+st+`"`, v)
	}
	family("scr_transferd_files_in_error", "gauge", "Files with an ERROR recorded or a malformed entry in the transfer file.")
	series("scr_transferd_files_in_error", "", float64(s.FilesInError))
	family("scr_transferd_files_with_warnings", "gauge", "Files flushed with a WARNING recorded in the transfer file (a checkpoint sound enough to flush that an operator should look at).")
	series("scr_transferd_files_with_warnings", "", float64(s.FilesWarned))
	family("scr_transferd_throttle_sleeps_total", "counter", "Pauses imposed by the BW and PERCENT limits.")
	series("scr_transferd_throttle_sleeps_total", "", float64(s.ThrottleSleeps))
	family("scr_transferd_throttle_sleep_seconds_total", "counter", "Time spent in pauses imposed by the BW and PERCENT limits.")
	series("scr_transferd_throttle_sleep_seconds_total", "", s.ThrottleSlept.Seconds())
	if s.BWAuto > 0 {
		family("scr_transferd_bw_auto_bytes_per_second", "gauge", "Rate in force under --bw auto, bytes/s averaged over about 5 s; present only with --bw auto.")
		series("scr_transferd_bw_auto_bytes_per_second", "", s.BWAuto)
	}
	family("scr_transferd_last_success_timestamp_seconds", "gauge", "Unix time at which a file was last flushed completely; 0 if none yet.")
	series("scr_transferd_last_success_timestamp_seconds", "", unixSeconds(s.LastSuccess))
	t.renderLiveness(s, family, series)
	return b.Bytes()
}

// renderLiveness renders the families that tell a live daemon and what
// it applies: the time of the sample, the limits in force, the build.
func (t *Textfile) renderLiveness(s Sample, family func(name, typ, help string), series func(name, extra string, v float64)) {
	family("scr_transferd_last_update_timestamp_seconds", "gauge",
		"Unix time at which the daemon last wrote this file (at least every "+Refresh.String()+"); a value far behind time() means the daemon is dead or hung.")
	series("scr_transferd_last_update_timestamp_seconds", "", unixSeconds(s.Updated))
	family("scr_transferd_bw_limit_bytes_per_second", "gauge", "BW in force, in bytes per second, as the daemon reads the transfer file; 0 for no limit.")
	series("scr_transferd_bw_limit_bytes_per_second", "", s.BWLimit)
	pct := s.PercentLimit
	if pct >= 100 {
		pct = 0
	}
	family("scr_transferd_percent_limit", "gauge", "PERCENT in force (share of wall time spent copying), as the daemon reads the transfer file; 0 for no limit.")
	series("scr_transferd_percent_limit", "", pct)
	family("scr_transferd_build_info", "gauge", "Always 1; the labels name the daemon's version, VCS revision and Go toolchain.")
	series("scr_transferd_build_info", t.build, 1)
}

// Refresh is how often the daemon rewrites the metrics file when nothing
// changed, so that scr_transferd_last_update_timestamp_seconds stays
// fresh while it lives.
const Refresh = 15 * time.Second

// Due reports whether the file should be written at now: with news, or
// when the last write (zero: none yet) is Refresh old.
func Due(news bool, last, now time.Time) bool {
	return news || last.IsZero() || now.Sub(last) >= Refresh
}

// unixSeconds is t in Unix seconds, 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// Update writes the file for s.
func (t *Textfile) Update(s Sample) error {
	return WriteAtomic(t.path, t.Render(s))
}

// Remove removes the file, for an instance that has ended; a file already
// gone is not an error.
func (t *Textfile) Remove() error {
	if err := os.Remove(t.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("metrics file %s: %w", t.path, err)
	}
	return nil
}

// WriteAtomic replaces the file at path with data: it writes a temporary
// file in the same directory and renames it over path, so that a reader
// sees either the old or the new content. The file is readable by all
// (0644), as the collector usually runs as another user. It is not
// fsynced: after a crash a stale or empty metrics file is harmless, and
// the daemon should not add I/O beside the application.
func WriteAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("metrics file %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("metrics file %s: %w", path, err)
	}
	return nil
}

// escapeLabel escapes a label value for the text format: backslash,
// double quote and line feed.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
