package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/filewatch"
	"github.com/scr-transferd/scr-transferd/status"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpStatus = `
Reads the transfer file under a shared lock and shows:

  1/4 files  49.0 MiB of 110 MiB  44.7%  3.00 MiB/s  ETA 20s  2 in error  RUNNING  PID 4242 up 1m05s
  /dev/shm/scr.1001/transfer.scrinfo  COMMAND RUN  BW 50.0 MiB/s  PERCENT 25%  flush 10s so far, 4.00 MiB/s
    /dev/shm/scr.1001/dataset.1/ → /p/lustre/user1/sim/scr.dataset.1/
    rank_0.sion  [██████████] 100.0%   9.00 MiB of 9.00 MiB   complete  crc 0x1a2b3c4d
    rank_1.ckpt  [████░░░░░░]  40.0%   40.0 MiB of 100 MiB    3.00 MiB/s  ETA 20s
    rank_2.ckpt  [░░░░░░░░░░]   0.0%        0 B of 512 KiB    error: retrying
      ERROR: open /p/lustre/user1/sim/scr.dataset.1/rank_2.ckpt: permission denied

The first line sums the flush up: complete/total files, bytes written of
the total, the rate and time left, the files in error, the daemon's STATE
and whether a daemon serves the file ("PID 4242 up 1m05s": the daemon
holding the file's instance lock, ".<name>.lock" beside it, and how long
since it took it; "NO DAEMON": none holds it, whatever STATE the file still
records, as after a daemon was killed; a line below says why). The second
names the transfer file, its COMMAND, BW and PERCENT, and how long the
flush has run ("flush took" once FLAG DONE ended it) with its average
rate, from the record the daemon keeps in the transfer file (FLUSH). Then
the problems found in the file, the directories the files are copied from
and to, and one line per file, named by what is left of its source once
that directory is removed ("a → b" when its destination's name differs).
Only a complete file is drawn full at 100.0%. "error: retrying" is a file
the daemon retries with back-off ("error: no daemon retries it" when none
serves the file); "invalid: not copied" is an entry the daemon will not
copy as it stands; WARNING is what the daemon noted about a checkpoint it
flushed all the same.

Long lists are folded: the files in error first, then the incomplete ones,
then the complete ones are shown, as many as fit the terminal (20 when
stdout is not a terminal), and one line counts the others by state. --all
shows every file. --json always has every file, and "daemon" says whether
one serves the file (serving, pid, since, reason).

Rates and times left appear with --watch, which redraws the view in place
on a terminal (on anything else it prints one view per reading) until
interrupted. They are of WRITTEN, which counts the holes of a sparse file
too, and which advances once per commit of the daemon (64 MiB or 2 s by
default): the rate is the bytes of the commits of the last 10 s or so over
the longest time the readings allow them, so it is never above the true
rate; the first commit seen only starts the count (its bytes may have
been copied before the watch began), so the rate shows from the second.
The time left is the bytes left at that rate, at most BW, and counts down
between commits. The daemon's metrics and log use the same estimate.
Without a FLUSH record (another daemon), --watch shows how long it has
watched and the average rate since. The transfer file may disappear and
come back meanwhile (SCR removes it at every SCR_Init): --watch says so
and goes on. --json prints one JSON object (schema 1, see the README);
with --watch, one compact object per line per reading, and none while the
file is missing.

A transfer file that cannot be decoded (a CRC mismatch, a truncated file)
is an error naming the problem; scr-ctl repair salvages what decodes.`

// statusReport is the report of package status, named here for the demo.
type statusReport = status.Report

// view is the layout of the text form: columns and rows, 0 when unknown.
type view struct {
	width, height int
	all           bool
}

func (o view) layout() status.Layout {
	return status.Layout{Width: o.width, Height: o.height, All: o.all}
}

func bwText(bw float64) string { return status.BWText(bw) }

func cmdStatus(e *env, args []string) error {
	fs := newFlags("status")
	asJSON := fs.Bool("json", false, "print JSON (schema 1) instead of the text view")
	watch := fs.Bool("watch", false, "keep reading and redraw on every change and every --interval, until interrupted")
	all := fs.Bool("all", false, "show every file instead of folding a long list")
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
	o := view{width: *width, all: *all}
	if isTerm && o.width == 0 {
		o.width = cols
	}
	if !*watch {
		t, err := readExisting(store)
		if err != nil {
			return err
		}
		r := status.Build(store.Path(), e.now(), t, nil)
		probeDaemon(&r)
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(r)
		}
		_, err = io.WriteString(e.stdout, status.Render(r, o.layout()))
		return err
	}
	if isTerm && !*asJSON {
		o.height = rows
	}
	return watchStatus(e, store, watchOpts{interval: *interval, poll: *poll, view: o,
		redraw: isTerm && !*asJSON, json: *asJSON, onChange: true})
}

// probeDaemon records in r whether a daemon serves its transfer file
// (status.Probe); a probe that fails is one of r's problems.
func probeDaemon(r *statusReport) {
	lv, err := status.Probe(r.TransferFile, transfer.View{State: transfer.State(r.State)})
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("cannot tell whether a daemon serves the file: %v", err))
		return
	}
	r.SetLiveness(lv)
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
// stop says a reading is the last. A transfer file that is missing (at the
// start or later) is shown as such, and watched for until it comes back.
func watchStatus(e *env, store *hashfile.Store, w watchOpts) error {
	var changed <-chan struct{}
	if w.onChange {
		changed = filewatch.Watch(e.ctx, store.Path(), w.poll, nil)
	}
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	m := status.NewMeter()
	prevLines := 0
	var missing time.Time // since when the file is missing; zero while present
	for {
		var out string
		var r *statusReport
		t, err := store.Read()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if missing.IsZero() {
				missing = e.now()
			}
			if !w.json { // JSON has no reading to print
				out = status.RenderMissing(store.Path(), missing, w.view.layout())
			}
		case err != nil:
			return explainCorrupt(err, store.Path())
		default:
			missing = time.Time{}
			rep := status.Build(store.Path(), e.now(), t, m)
			probeDaemon(&rep)
			r = &rep
			if w.json {
				b, err := json.Marshal(rep)
				if err != nil {
					return err
				}
				out = string(b) + "\n"
			} else {
				out = status.Render(rep, w.view.layout())
			}
		}
		if err := writeFrame(e, &prevLines, out, w); err != nil {
			return err
		}
		if r != nil && w.stop != nil && w.stop(*r) {
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

// writeFrame writes one reading: in place of the previous one when
// redrawing on a terminal, after it otherwise.
func writeFrame(e *env, prevLines *int, frame string, w watchOpts) error {
	out := frame
	switch {
	case frame == "":
		return nil
	case w.json:
	case w.redraw:
		if *prevLines > 0 {
			out = "\r" + ansi.CursorUp(*prevLines) + ansi.EraseScreenBelow + frame
		}
		*prevLines = strings.Count(frame, "\n")
	default:
		out = frame + "\n"
	}
	_, err := io.WriteString(e.stdout, out)
	return err
}
