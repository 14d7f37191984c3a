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

// barWidth is the progress bar's width in cells for a line of the view.
func (o Layout) barWidth() int {
	if o.Width <= 0 {
		return 24
	}
	// The rest of a progress line takes 39 cells, and its detail up to 26
	// ("complete  crc 0x1a2b3c4d"); one cell stays free.
	return max(10, min(40, o.Width-66))
}

// Render writes the text form of r: a header, two lines per file shown
// (one more for an ERROR, one for a WARNING), a line folding the files not shown, and the
// totals. It fits o: lines one cell narrower than the width (so that no
// terminal wraps them), and no more lines than the height.
func Render(r Report, o Layout) string {
	var lines []string
	add := func(s string) { lines = append(lines, s) }
	add(r.TransferFile)
	add(fmt.Sprintf("STATE %s  COMMAND %s  BW %s  PERCENT %s",
		orNone(r.State, "(none)"), orNone(r.Command, "(none)"), keptText(r.BWKept, BWText(r.BW)), keptText(r.PercentKept, percentText(r.Percent))))
	for _, p := range r.Problems {
		add("  problem: " + p)
	}
	shown, hidden := selectFiles(r.Files, o, len(lines))
	for _, i := range shown {
		f := r.Files[i]
		add("  " + pathPair(f.Source, orNone(f.Destination, "(no DESTINATION)"), o.Width-3))
		var detail string
		switch {
		case f.State == transfer.StateComplete:
			detail = "complete"
			if f.CRC != "" {
				detail += "  crc " + f.CRC
			}
		case f.State == transfer.StateInvalid:
			detail = "invalid: not copied"
		case f.State == transfer.StateError:
			detail = "error: retrying"
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
	if len(hidden) > 0 {
		add("  " + foldText(r.Files, hidden, o))
	}
	t := r.Totals
	add(fmt.Sprintf("total: %d files, %d complete, %d in error%s", t.Files, t.Complete, t.InError, elapsedText(r)))
	detail := rateText(t.Rate, t.ETA)
	if r.Complete {
		detail = "flush complete (FLAG DONE)"
	}
	add("    " + progressLine(t.Written, t.Size, detail, o))
	if o.Width > 0 {
		for i, l := range lines {
			lines[i] = ansi.Truncate(l, o.Width-1, "…")
		}
	}
	return strings.Join(lines, "\n") + "\n"
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

// elapsedText times the flush from the daemon's record: "; took 1m05s,
// average 98.2 MiB/s" once FLAG DONE ended it, "; 1m05s so far, average
// 98.2 MiB/s" while under way. Without a record, it is
// "; elapsed 1m05s, average 98.2 MiB/s" when a watch has lasted long
// enough to say (both count from the watch's first reading).
func elapsedText(r Report) string {
	seconds := func(s float64) string { return FormatDuration(time.Duration(s * float64(time.Second))) }
	if f := r.Flush; f != nil {
		s := "; " + seconds(f.Elapsed) + " so far"
		if f.Ended != nil {
			s = "; took " + seconds(f.Elapsed)
		}
		if f.Average != nil {
			s += ", average " + units.IEC(*f.Average) + "/s"
		}
		return s
	}
	t := r.Totals
	if t.Elapsed == nil || t.Average == nil {
		return ""
	}
	return fmt.Sprintf("; elapsed %s, average %s/s", seconds(*t.Elapsed), units.IEC(*t.Average))
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
	need := func(f File) int { // two lines per file, one per error or warning
		n := 2
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
		// The header and the two total lines stay; a fold line too when
		// not every file fits.
		if room = fits(o.Height - header - 2); room < len(files) {
			room = fits(o.Height - header - 3)
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
func progressLine(written, size int64, detail string, o Layout) string {
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

func percentText(p float64) string {
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
