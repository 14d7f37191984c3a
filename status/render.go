package status

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// DefaultFiles is how many files the text form shows, when it has no
// terminal height to fit and is not asked for all of them; the others are
// folded into one line counting them by state.
const DefaultFiles = 20

// Layout is how the text form is laid out.
type Layout struct {
	Width  int  // columns; 0: no limit (not a terminal)
	Height int  // rows; 0: no limit, but at most DefaultFiles files unless All
	All    bool // every file, whatever the height
}

// figuresWidth is the width of a progress line without its bar and name:
// "[" "]", " 100.0%", "  1023 MiB of 1023 MiB", two spaces and a detail of
// up to 20 cells ("3.00 MiB/s  ETA 20s"; a longer one may be cut).
const figuresWidth = 2 + 7 + 2 + 9 + 4 + 9 + 2 + 20

// columns returns the widths of the name column and of the bar for names
// at most longest cells wide.
func (o Layout) columns(longest int) (name, bar int) {
	if o.Width <= 0 {
		return min(longest, 60), 24
	}
	// Two cells of indent and two after the name; one cell stays free so
	// that no terminal wraps the line.
	room := o.Width - 1 - 4 - figuresWidth
	name = min(longest, max(12, room-6))
	return name, max(6, min(30, room-name))
}

// Render writes the text form of r: a one-line summary (bytes, rate and
// time left, files, STATE, whether a daemon serves the file), the transfer
// file with COMMAND, BW, PERCENT and the flush's time, the problems, the
// directories the files are in, then one line per file shown, named by what
// differs between them (one more line for an ERROR, one for a WARNING), and a
// line folding the files not shown. It fits o: lines one cell narrower than
// the width (so that no terminal wraps them), and no more lines than the
// height.
func Render(r Report, o Layout) string {
	lines := []string{summaryLine(r), fileLine(r)}
	add := func(s string) { lines = append(lines, s) }
	if d := r.Daemon; d != nil && !d.Serving {
		add("  no daemon serves this file: " + d.Reason)
	}
	for _, p := range r.Problems {
		add("  problem: " + p)
	}
	names := shortNames(r.Files)
	if names.srcDir != "" || names.destDir != "" {
		add("  " + orNone(names.srcDir, "/") + " → " + orNone(names.destDir, "/"))
	}
	shown, hidden := selectFiles(r.Files, o, len(lines))
	longest := 0
	for _, i := range shown {
		longest = max(longest, ansi.StringWidth(names.of[i]))
	}
	nameW, barW := o.columns(longest)
	for _, i := range shown {
		f := r.Files[i]
		name := elide(names.of[i], nameW)
		name += strings.Repeat(" ", max(nameW-ansi.StringWidth(name), 0))
		add("  " + name + "  " + fileProgress(f, r.Daemon, barW))
		if f.Error != "" {
			add("    ERROR: " + f.Error)
		}
		if f.Warning != "" {
			add("    WARNING: " + f.Warning)
		}
	}
	if len(hidden) > 0 {
		add("  " + foldText(r.Files, hidden, o))
	}
	if o.Width > 0 {
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, o.Width-1, "…")
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// summaryLine is the view's first line, what a glance needs: "1/4 files
// 49.0 MiB of 110 MiB  44.7%  3.00 MiB/s  ETA 20s  2 in error  RUNNING
// PID 4242 up 1m05s".
func summaryLine(r Report) string {
	t := r.Totals
	allDone := r.Complete || t.Files > 0 && t.Complete == t.Files
	parts := []string{fmt.Sprintf("%d/%d %s", t.Complete, t.Files, plural(t.Files, "file", "files")),
		fmt.Sprintf("%s of %s", units.IEC(float64(t.Written)), units.IEC(float64(t.Size))),
		percentOf(t.Written, t.Size, allDone)}
	if r.Complete {
		parts = append(parts, "flush complete (FLAG DONE)")
	} else {
		parts = append(parts, rateText(t.Rate, t.ETA))
	}
	if t.InError > 0 {
		parts = append(parts, fmt.Sprintf("%d in error", t.InError))
	}
	parts = append(parts, orNone(r.State, "no STATE"))
	if d := r.Daemon; d != nil {
		parts = append(parts, daemonText(*d, r.Time))
	}
	return strings.Join(parts, "  ")
}

// daemonText says whether a daemon serves the file: "PID 4242 up 1m05s"
// (since it took its instance lock), "NO DAEMON", or "daemon unverified"
// when only the STATE recorded says so (no lock file to probe).
func daemonText(d Daemon, now time.Time) string {
	switch {
	case !d.Serving:
		return "NO DAEMON"
	case d.PID > 0 && d.Since != nil:
		return fmt.Sprintf("PID %d up %s", d.PID, FormatDuration(now.Sub(*d.Since)))
	case d.PID > 0:
		return fmt.Sprintf("PID %d", d.PID)
	case d.Since != nil:
		return "daemon up " + FormatDuration(now.Sub(*d.Since))
	}
	return "daemon unverified"
}

// fileLine names the transfer file with its COMMAND, limits and the
// flush's time.
func fileLine(r Report) string {
	return fmt.Sprintf("%s  COMMAND %s  BW %s  PERCENT %s%s", r.TransferFile,
		orNone(r.Command, "(none)"), keptText(r.BWKept, BWText(r.BW)), keptText(r.PercentKept, PercentText(r.Percent)), elapsedText(r))
}

// fileProgress is a file's progress line after its name.
func fileProgress(f File, d *Daemon, barW int) string {
	var detail string
	switch {
	case f.State == transfer.StateComplete:
		detail = "complete"
		if f.CRC != "" {
			detail += "  crc " + f.CRC
		}
	case f.State == transfer.StateInvalid:
		return progressLine(0, -1, false, "invalid: not copied", barW)
	case f.State == transfer.StateError && d != nil && !d.Serving:
		detail = "error: no daemon retries it"
	case f.State == transfer.StateError:
		detail = "error: retrying"
	case f.Written == 0 && (f.Rate == nil || *f.Rate == 0):
		detail = "waiting"
	default:
		detail = rateText(f.Rate, f.ETA)
	}
	return progressLine(f.Written, f.Size, f.State == transfer.StateComplete, detail, barW)
}

// names are the files' names in the view: the directories all sources and
// all destinations are in, and what is left of each file's paths.
type names struct {
	srcDir, destDir string // "" when they have none in common but "/"
	of              []string
}

// shortNames removes from every source the directory all sources are in,
// and from every destination the one all destinations are in: a file is
// named by what is left of its source, and "→ destination" when what is
// left of its destination differs.
func shortNames(files []File) names {
	var srcs, dests []string
	for _, f := range files {
		srcs = append(srcs, f.Source)
		if f.Destination != "" {
			dests = append(dests, f.Destination)
		}
	}
	n := names{srcDir: commonDir(srcs), destDir: commonDir(dests)}
	for _, f := range files {
		src := strings.TrimPrefix(f.Source, n.srcDir)
		dest := strings.TrimPrefix(f.Destination, n.destDir)
		switch {
		case f.Destination == "":
			src += " → (no DESTINATION)"
		case dest != src:
			src += " → " + dest
		}
		n.of = append(n.of, src)
	}
	return n
}

// commonDir returns the longest directory, ending in "/", that every path
// is beneath; "" when it is "/" or there are no paths.
func commonDir(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	dir := paths[0][:strings.LastIndexByte(paths[0], '/')+1]
	for _, p := range paths[1:] {
		for !strings.HasPrefix(p, dir) {
			dir = dir[:strings.LastIndexByte(strings.TrimSuffix(dir, "/"), '/')+1]
		}
	}
	if dir == "/" {
		return ""
	}
	return dir
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// RenderMissing is the text form of a transfer file that does not exist
// (SCR removes it at every SCR_Init and writes it again), for a watch
// that waits for it to come back.
func RenderMissing(path string, since time.Time, o Layout) string {
	lines := []string{path, "no transfer file since " + since.Format("15:04:05") +
		" (SCR removes it at SCR_Init and writes it again); waiting for it"}
	if o.Width > 0 {
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, o.Width-1, "…")
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// elapsedText times the flush from the daemon's record: "  flush took
// 1m05s, 98.2 MiB/s" once FLAG DONE ended it, "  flush 1m05s so far, 98.2
// MiB/s" while under way. Without a record, it is "  watched 1m05s, 98.2
// MiB/s" when a watch has lasted long enough to say (both count from the
// watch's first reading).
func elapsedText(r Report) string {
	seconds := func(s float64) string { return FormatDuration(time.Duration(s * float64(time.Second))) }
	if f := r.Flush; f != nil {
		s := "  flush " + seconds(f.Elapsed) + " so far"
		if f.Ended != nil {
			s = "  flush took " + seconds(f.Elapsed)
		}
		if f.Average != nil {
			s += ", " + units.IEC(*f.Average) + "/s"
		}
		return s
	}
	t := r.Totals
	if t.Elapsed == nil || t.Average == nil {
		return ""
	}
	return fmt.Sprintf("  watched %s, %s/s", seconds(*t.Elapsed), units.IEC(*t.Average))
}

// selectFiles picks the files to show: all of them when they fit (the
// height, or DefaultFiles without one) or o.All; otherwise those in error
// first, then the incomplete ones, then the complete ones, as many as fit,
// each shown in the file's order. header is the number of lines above the
// files.
func selectFiles(files []File, o Layout, header int) (shown, hidden []int) {
	var order []int
	for _, pass := range [][]transfer.FileState{{transfer.StateError, transfer.StateInvalid}, {transfer.StatePending}, {transfer.StateComplete}} {
		for i, f := range files {
			if f.State == pass[0] || len(pass) > 1 && f.State == pass[1] {
				order = append(order, i)
			}
		}
	}
	need := func(f File) int { // a line per file, one per error or warning
		n := 1
		if f.Error != "" {
			n++
		}
		if f.Warning != "" {
			n++
		}
		return n
	}
	fits := func(lines int) int { // how many of order fit in lines
		n := 0
		for _, i := range order {
			if lines < need(files[i]) {
				break
			}
			lines -= need(files[i])
			n++
		}
		return n
	}
	room := len(files)
	switch {
	case o.All:
	case o.Height > 0:
		// The header stays; a fold line too when not every file fits.
		if room = fits(o.Height - header); room < len(files) {
			room = fits(o.Height - header - 1)
		}
	default:
		room = min(room, DefaultFiles)
	}
	pick := make([]bool, len(files))
	for _, i := range order[:room] {
		pick[i] = true
	}
	for i := range files {
		if pick[i] {
			shown = append(shown, i)
		} else {
			hidden = append(hidden, i)
		}
	}
	return shown, hidden
}

// foldText counts the files not shown by state.
func foldText(files []File, hidden []int, o Layout) string {
	var n [transfer.StateInvalid + 1]int
	for _, i := range hidden {
		n[files[i].State]++
	}
	var parts []string
	for s, k := range n {
		if k > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", k, transfer.FileState(s)))
		}
	}
	s := fmt.Sprintf("… %d more files (%s)", len(hidden), strings.Join(parts, ", "))
	if !o.All {
		s += "; --all shows every file"
	}
	return s
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
// size shows an empty bar without figures. Only a complete file is drawn
// full: any other stops one cell and a tenth of a percent short, whatever
// its WRITTEN says.
func progressLine(written, size int64, complete bool, detail string, w int) string {
	if size < 0 {
		return fmt.Sprintf("[%s] %6s  %9s    %-9s  %s", strings.Repeat("░", w), "-", "", "", detail)
	}
	frac := fraction(written, size, complete)
	full := int(frac * float64(w))
	if !complete {
		full = min(full, w-1)
	}
	bar := strings.Repeat("█", full) + strings.Repeat("░", w-full)
	return fmt.Sprintf("[%s] %6s  %9s of %-9s  %s", bar, percentOf(written, size, complete),
		units.IEC(float64(written)), units.IEC(float64(size)), detail)
}

// fraction is how much of size written is, 1 for an empty complete file.
func fraction(written, size int64, complete bool) float64 {
	if size <= 0 {
		if complete {
			return 1
		}
		return 0
	}
	return float64(min(max(written, 0), size)) / float64(size)
}

// percentOf writes the share written of size, "100.0%" only when complete.
func percentOf(written, size int64, complete bool) string {
	p := 100 * fraction(written, size, complete)
	if !complete {
		p = min(p, 99.9)
	}
	return fmt.Sprintf("%.1f%%", p)
}

func rateText(rate, etaSec *float64) string {
	r, e := "rate -", ""
	if rate != nil {
		r = units.IEC(*rate) + "/s"
	}
	if etaSec != nil {
		e = "  ETA " + FormatDuration(time.Duration(*etaSec*float64(time.Second)))
	}
	return r + e
}

// BWText writes a BW limit: "50.0 MiB/s", or "unlimited" for 0.
func BWText(bw float64) string {
	if bw <= 0 {
		return "unlimited"
	}
	return units.IEC(bw) + "/s"
}

// PercentText writes a PERCENT limit: "25%", or "unlimited" for 0 or 100
// and above.
func PercentText(p float64) string {
	if p <= 0 || p >= 100 {
		return "unlimited"
	}
	return fmt.Sprintf("%g%%", p)
}

// keptText is a limit's text, or what is in force when the file's value
// is unusable (transfer.ReadLimits): the daemon's previous limit.
func keptText(kept bool, text string) string {
	if kept {
		return "(previous value kept, see problem)"
	}
	return text
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// FormatDuration writes d rounded to a second, in the largest two units.
func FormatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 100*3600:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}
