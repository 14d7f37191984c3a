package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpStatus = `
Reads the transfer file under a shared lock and shows, for every FILES
entry, source -> destination, a progress bar (WRITTEN of SIZE), the copy rate
and the time left, the ERROR the daemon recorded if any and the WARNING
it recorded about a checkpoint it flushed all the same; then the
totals, the daemon's STATE, the COMMAND, BW and PERCENT.

Rates are of WRITTEN, which counts the holes of a sparse file too, and
come from successive readings (over the last 10 s), so they and the times
left appear with --watch, which redraws the view in place on a terminal (on anything else it
prints one view per reading) until interrupted. --json prints one JSON
object (schema 1, see the README); with --watch, one compact object per
line per reading.`

// statusSchema is the version of the --json output; it changes only when a
// field changes meaning or disappears.
const statusSchema = 1

// statusReport is one reading of a transfer file: what status shows, and
// its --json form.
type statusReport struct {
	Schema       int          `json:"schema"`
	TransferFile string       `json:"transfer_file"`
	Time         time.Time    `json:"time"`     // when the file was read
	State        string       `json:"state"`    // RUNNING, STOPPED, EXITING; "" if not recorded
	Command      string       `json:"command"`  // RUN, STOP, EXIT, another value as written, or ""
	Done         bool         `json:"done"`     // FLAG DONE is set
	Complete     bool         `json:"complete"` // FLAG DONE and every file has WRITTEN >= SIZE
	BW           float64      `json:"bw"`       // bytes per second; 0 = unlimited
	Percent      float64      `json:"percent"`  // 0 = unlimited
	Totals       statusTotals `json:"totals"`
	Files        []fileStatus `json:"files"`
	Problems     []string     `json:"problems,omitempty"` // malformed top-level values
}

// statusTotals sums the sound files of a reading.
type statusTotals struct {
	Files    int      `json:"files"`
	Complete int      `json:"complete"`
	InError  int      `json:"in_error"`
	Size     int64    `json:"size"`
	Written  int64    `json:"written"`
	Pending  int64    `json:"pending"`
	Rate     *float64 `json:"rate"`        // bytes/s over recent readings; null when unknown
	ETA      *float64 `json:"eta_seconds"` // seconds left at Rate; null when unknown
}

// fileStatus is one FILES entry of a reading.
type fileStatus struct {
	Source      string             `json:"source"`
	Destination string             `json:"destination"`
	Size        int64              `json:"size"`
	Written     int64              `json:"written"`
	State       transfer.FileState `json:"state"` // complete, pending, error or invalid
	Rate        *float64           `json:"rate"`
	ETA         *float64           `json:"eta_seconds"`
	Error       string             `json:"error,omitempty"`   // the daemon's ERROR, or why the entry is invalid
	CRC         string             `json:"crc,omitempty"`     // CRC32 recorded when complete, "0x…"
	Warning     string             `json:"warning,omitempty"` // the daemon's WARNING about a flushed checkpoint
}

// rateWindow is how far back rates look: WRITTEN advances in steps (each
// fsync of the destination), so a rate over one interval would jump.
const rateWindow = 10 * time.Second

// rateMeter estimates copy rates from successive readings.
type rateMeter struct {
	files map[string][]sample // by source, destination and size
	total []sample
}

type sample struct {
	at time.Time
	n  int64
}

func newRateMeter() *rateMeter { return &rateMeter{files: map[string][]sample{}} }

// observe adds a reading and returns the rate over the readings of the last
// rateWindow (at least two are needed). A count that went down (the entry
// was reset) starts afresh.
func observe(h []sample, at time.Time, n int64) ([]sample, *float64) {
	if k := len(h); k > 0 {
		switch {
		case n < h[k-1].n:
			h = h[:0]
		case !at.After(h[k-1].at):
			h = h[:k-1] // a reading at the same instant replaces the last
		}
	}
	h = append(h, sample{at, n})
	// A count that had not moved before this reading (a file waiting for
	// its turn): the wait is not part of its rate.
	if k := len(h); k > 2 && h[0].n == h[k-2].n && h[k-1].n != h[k-2].n {
		h = append(h[:0], h[k-2], h[k-1])
	}
	// Look at the samples within the window; if that leaves one, the
	// newest older sample is the baseline.
	cut := 0
	for cut < len(h) && at.Sub(h[cut].at) > rateWindow {
		cut++
	}
	if cut > 0 && len(h)-cut < 2 {
		cut--
	}
	h = append(h[:0], h[cut:]...)
	if len(h) < 2 {
		return h, nil
	}
	dt := h[len(h)-1].at.Sub(h[0].at).Seconds()
	if dt <= 0 {
		return h, nil
	}
	r := float64(h[len(h)-1].n-h[0].n) / dt
	return h, &r
}

// build turns a reading of the transfer file into a report, updating the
// meter (nil: no rates).
func buildReport(path string, at time.Time, t *hashfile.Tree, m *rateMeter) statusReport {
	v := transfer.Read(t)
	r := statusReport{
		Schema: statusSchema, TransferFile: path, Time: at,
		State: string(v.State), Command: string(v.Command), Done: v.Done,
		BW: v.BW, Percent: v.Percent, Files: []fileStatus{},
	}
	if v.Unknown != "" {
		r.Command = v.Unknown
	}
	for _, p := range v.Problems {
		r.Problems = append(r.Problems, p.Error())
	}
	seen := map[string]bool{}
	for _, f := range v.Files {
		fs := fileStatus{Source: f.Src, Destination: f.Dest, Size: f.Size, Written: f.Written, Error: f.Error,
			State: f.State(), Warning: f.Warning}
		if f.Problem != nil && fs.Error == "" {
			fs.Error = "malformed FILES entry: " + f.Problem.Error()
		}
		if f.HasCRC && fs.State == transfer.StateComplete {
			fs.CRC = hashfile.FormatCRC(f.CRC)
		}
		if f.Problem == nil {
			r.Totals.Files++
			if fs.State == transfer.StateComplete {
				r.Totals.Complete++
			}
			if m != nil {
				key := f.Src + "\x00" + f.Dest + "\x00" + fmt.Sprint(f.Size)
				seen[key] = true
				m.files[key], fs.Rate = observe(m.files[key], at, min(f.Written, f.Size))
				fs.ETA = eta(f.Size-min(f.Written, f.Size), fs.Rate)
			}
		}
		if fs.State == transfer.StateError || fs.State == transfer.StateInvalid {
			r.Totals.InError++
		}
		r.Files = append(r.Files, fs)
	}
	r.Totals.Size, r.Totals.Written = v.Totals()
	r.Totals.Pending = r.Totals.Size - r.Totals.Written
	r.Complete = v.Done && !v.HasPending()
	if m != nil {
		for k := range m.files {
			if !seen[k] {
				delete(m.files, k)
			}
		}
		m.total, r.Totals.Rate = observe(m.total, at, r.Totals.Written)
		r.Totals.ETA = eta(r.Totals.Pending, r.Totals.Rate)
	}
	return r
}

// eta returns the seconds needed for left bytes at rate, nil when unknown.
func eta(left int64, rate *float64) *float64 {
	if left == 0 {
		z := 0.0
		return &z
	}
	if rate == nil || *rate <= 0 {
		return nil
	}
	s := float64(left) / *rate
	return &s
}

// view is how the text form is laid out.
type view struct {
	width  int // columns; 0: no limit (not a terminal)
	height int // rows; 0: no limit
}

// barWidth is the progress bar's width in cells for a line of the view.
func (o view) barWidth() int {
	if o.width <= 0 {
		return 24
	}
	// The rest of a progress line takes 60 cells at most.
	return max(10, min(40, o.width-61))
}

// renderText writes the human form of r.
func renderText(r statusReport, o view) string {
	var lines []string
	add := func(s string) { lines = append(lines, s) }
	add(r.TransferFile)
	add(fmt.Sprintf("STATE %s  COMMAND %s  BW %s  PERCENT %s",
		orNone(r.State, "(none)"), orNone(r.Command, "(none)"), bwText(r.BW), percentText(r.Percent)))
	for _, p := range r.Problems {
		add("  problem: " + p)
	}
	shown, hidden := selectFiles(r.Files, o)
	for _, i := range shown {
		f := r.Files[i]
		add("  " + pathPair(f.Source, orNone(f.Destination, "(no DESTINATION)"), o.width-3))
		detail := ""
		switch {
		case f.State == transfer.StateComplete:
			detail = "complete"
			if f.CRC != "" {
				detail += "  crc " + f.CRC
			}
		case f.State == transfer.StateInvalid:
			detail = "invalid"
		case f.Written == 0 && (f.Rate == nil || *f.Rate == 0):
			detail = "waiting"
		default:
			detail = rateText(f.Rate, f.ETA)
		}
		written, size := f.Written, f.Size
		if f.State == transfer.StateInvalid {
			written, size = 0, -1 // no figures to show
		}
		add("    " + progressLine(written, size, detail, o))
		if f.Error != "" {
			add("    ERROR: " + f.Error)
		}
		if f.Warning != "" {
			add("    WARNING: " + f.Warning)
		}
	}
	if hidden > 0 {
		add(fmt.Sprintf("  … %d more files not shown", hidden))
	}
	t := r.Totals
	add(fmt.Sprintf("total: %d files, %d complete, %d in error", t.Files, t.Complete, t.InError))
	detail := rateText(t.Rate, t.ETA)
	if r.Complete {
		detail = "flush complete (FLAG DONE)"
	}
	add("    " + progressLine(t.Written, t.Size, detail, o))
	if o.width > 0 {
		// One cell short of the width, so that no terminal wraps a line
		// and a redraw moves up exactly the lines it wrote.
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, o.width-1, "…")
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// selectFiles picks the files that fit the view's height: all of them if
// they fit, otherwise those in error first, then the incomplete ones, then
// the complete ones, each shown in the file's order.
func selectFiles(files []fileStatus, o view) (shown []int, hidden int) {
	room := len(files)
	if o.height > 0 {
		// Two lines per file and one per error; the two header lines, the
		// "more" line and the two total lines stay.
		lines := o.height - 6
		room = 0
		for _, f := range files {
			need := 2
			if f.Error != "" {
				need++
			}
			if f.Warning != "" {
				need++
			}
			if lines < need {
				break
			}
			lines -= need
			room++
		}
	}
	if room >= len(files) {
		for i := range files {
			shown = append(shown, i)
		}
		return shown, 0
	}
	pick := make([]bool, len(files))
	n := 0
	for _, pass := range [][]transfer.FileState{{transfer.StateError, transfer.StateInvalid}, {transfer.StatePending}, {transfer.StateComplete}} {
		for i, f := range files {
			if n < room && !pick[i] && (f.State == pass[0] || len(pass) > 1 && f.State == pass[1]) {
				pick[i] = true
				n++
			}
		}
	}
	for i := range files {
		if pick[i] {
			shown = append(shown, i)
		}
	}
	return shown, len(files) - len(shown)
}

// pathPair writes "src → dest", eliding the start of each path so that the
// pair fits in width cells (0: no limit).
func pathPair(src, dest string, width int) string {
	const arrow = " → "
	s := src + arrow + dest
	if width <= 0 || ansi.StringWidth(s) <= width {
		return s
	}
	room := max(width-ansi.StringWidth(arrow), 8)
	half := room / 2
	sw, dw := ansi.StringWidth(src), ansi.StringWidth(dest)
	switch {
	case sw <= half:
		dest = elide(dest, room-sw)
	case dw <= room-half:
		src = elide(src, room-dw)
	default:
		src, dest = elide(src, half), elide(dest, room-half)
	}
	return src + arrow + dest
}

// elide keeps the end of s within width cells, marking the cut with "…".
func elide(s string, width int) string {
	w := ansi.StringWidth(s)
	if w <= width {
		return s
	}
	return ansi.TruncateLeft(s, w-width+1, "…")
}

// progressLine writes "[bar]  pct  written of size  detail"; a negative
// size shows an empty bar without figures.
func progressLine(written, size int64, detail string, o view) string {
	w := o.barWidth()
	if size < 0 {
		return fmt.Sprintf("[%s] %6s  %9s    %-9s  %s", strings.Repeat("░", w), "-", "", "", detail)
	}
	frac := 1.0
	if size > 0 {
		frac = float64(min(written, size)) / float64(size)
	}
	full := int(frac * float64(w))
	bar := strings.Repeat("█", full) + strings.Repeat("░", w-full)
	return fmt.Sprintf("[%s] %5.1f%%  %9s of %-9s  %s", bar, 100*frac, units.IEC(float64(written)), units.IEC(float64(size)), detail)
}

func rateText(rate, etaSec *float64) string {
	r, e := "rate -", ""
	if rate != nil {
		r = units.IEC(*rate) + "/s"
	}
	if etaSec != nil {
		e = "  ETA " + formatDuration(time.Duration(*etaSec*float64(time.Second)))
	}
	return r + e
}

func bwText(bw float64) string {
	if bw <= 0 {
		return "unlimited"
	}
	return units.IEC(bw) + "/s"
}

func percentText(p float64) string {
	if p <= 0 || p >= 100 {
		return "unlimited"
	}
	return fmt.Sprintf("%g%%", p)
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func cmdStatus(e *env, args []string) error {
	fs := newFlags("status")
	asJSON := fs.Bool("json", false, "print JSON (schema 1) instead of the text view")
	watch := fs.Bool("watch", false, "keep reading and redraw on every change and every --interval, until interrupted")
	interval := fs.Duration("interval", time.Second, "with --watch, read at least this often")
	poll := fs.Duration("poll", defaultPoll, "with --watch, check the file's metadata this often besides inotify")
	width := fs.Int("width", 0, "lay the text out for this many columns (default: the terminal's, no limit elsewhere)")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "exactly one TRANSFERFILE"); err != nil {
		return err
	}
	if *interval <= 0 || *poll <= 0 || *width < 0 {
		return usageError{"--interval and --poll must be positive, --width not negative"}
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	isTerm, cols, rows := e.term()
	o := view{width: *width}
	if isTerm && o.width == 0 {
		o.width = cols
	}
	if !*watch {
		t, err := readExisting(store)
		if err != nil {
			return err
		}
		r := buildReport(store.Path(), e.now(), t, nil)
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(r)
		}
		_, err = io.WriteString(e.stdout, renderText(r, o))
		return err
	}
	if isTerm && !*asJSON {
		o.height = rows
	}
	return watchStatus(e, store, watchOpts{interval: *interval, poll: *poll, view: o,
		redraw: isTerm && !*asJSON, json: *asJSON, onChange: true})
}

// watchOpts say how watchStatus shows successive readings.
type watchOpts struct {
	interval time.Duration // read at least this often
	poll     time.Duration // metadata poll besides inotify
	view     view
	redraw   bool // replace the previous view (on a terminal)
	json     bool // one compact JSON object per reading
	onChange bool // read on every change of the file too, not only every interval
	// stop, if set, is called with every reading; true makes it the last.
	stop func(statusReport) bool
}

// watchStatus shows a reading of the transfer file every interval (and on
// every change if onChange) until e's context ends (a normal end: nil) or
// stop says a reading is the last.
func watchStatus(e *env, store *hashfile.Store, w watchOpts) error {
	var changed <-chan struct{}
	if w.onChange {
		changed = filewatch.Watch(e.ctx, store.Path(), w.poll, nil)
	}
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	m := newRateMeter()
	prevLines := 0
	for {
		t, err := readExisting(store)
		if err != nil {
			return err
		}
		r := buildReport(store.Path(), e.now(), t, m)
		var out string
		switch {
		case w.json:
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			out = string(b) + "\n"
		case w.redraw:
			frame := renderText(r, w.view)
			out = frame
			if prevLines > 0 {
				out = "\r" + ansi.CursorUp(prevLines) + ansi.EraseScreenBelow + frame
			}
			prevLines = strings.Count(frame, "\n")
		default:
			out = renderText(r, w.view) + "\n"
		}
		if _, err := io.WriteString(e.stdout, out); err != nil {
			return err
		}
		if w.stop != nil && w.stop(r) {
			return nil
		}
		select {
		case <-e.ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}
