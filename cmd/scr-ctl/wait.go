package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/status"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpWait = `
Blocks until the flush is complete, and says so in one line: the files and
bytes of the flush in all, what this flush wrote, how long it took and its
average rate (from the FLUSH record the daemon keeps in the transfer file:
a flush resumed after a restart or a STOP writes only what was left), and
how long the wait took. Without a record (another daemon), it gives the
bytes written while it waited. For example:
  /scr/transfer.scrinfo: flush complete: 2004 files, 1.03 GiB in all; this
  flush wrote 239 MiB in 0.5s, 468 MiB/s (817 MiB were written before it);
  waited 0.6s
Complete
means FLAG DONE is set and every file is complete, or no flush is asked for
(no COMMAND RUN) and no file has bytes left (exit status 0).

A file in ERROR is one the daemon retries with back-off (the parallel file
system may be back in a moment): wait reports it on stderr, and again
whenever its ERROR changes or clears, and keeps waiting. It ends with exit
status 1 instead:
  - with --fail-on-error, at the first file in ERROR;
  - when the daemon gives up on a file: an entry that is malformed or that
    the daemon refused ("refused FILES entry"), which it will not copy
    until the library rewrites it;
  - when no daemon serves the file for --grace: none holds the daemon's
    instance lock (".<name>.lock" beside the transfer file), or it recorded
    STATE EXITING. Where no lock file exists (a daemon that does not take
    one), no STATE or STATE EXITING means no daemon. A daemon started or
    restarted within --grace is waited for;
  - when --timeout has passed (the message says how far the flush got).
The transfer file must exist. It is watched with inotify, and its metadata
polled every --poll for file systems where inotify misses other nodes'
writes.`

// liveCheck turns status.Probe into an error once no daemon has served
// the transfer file for grace.
type liveCheck struct {
	path  string
	grace time.Duration
	now   func() time.Time
	since time.Time // when the daemon was first found missing; zero while served
}

// check probes the daemon with the reading v; it returns an error once no
// daemon has served the file for the whole grace period.
func (l *liveCheck) check(v transfer.View) error {
	lv, err := status.Probe(l.path, v)
	if err != nil {
		return err
	}
	if lv.Serving {
		l.since = time.Time{}
		return nil
	}
	now := l.now()
	if l.since.IsZero() {
		l.since = now
	}
	if now.Sub(l.since) < l.grace {
		return nil
	}
	return fmt.Errorf("no daemon serves %s: %s", l.path, lv.Reason)
}

// recheck is how often a waiting command probes the daemon when the file
// does not change: often enough to notice a death within the grace.
func recheck(grace time.Duration) time.Duration {
	return min(max(grace/4, 50*time.Millisecond), time.Second)
}

func cmdWait(e *env, args []string) error {
	fs := newFlags("wait")
	timeout := fs.Duration("timeout", 0, "give up after this long (0: wait for ever)")
	grace := fs.Duration("grace", defaultGrace, "fail when no daemon has served the file for this long")
	failOnError := fs.Bool("fail-on-error", false, "fail at the first file in ERROR instead of waiting for the daemon's retries")
	poll := fs.Duration("poll", defaultPoll, "check the file's metadata this often besides inotify")
	quiet := fs.Bool("quiet", false, "print nothing on success (errors still go to stderr)")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "exactly one TRANSFERFILE"); err != nil {
		return err
	}
	if err := checkDurations(*timeout, *grace, *poll); err != nil {
		return err
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(e.ctx, *timeout)
	defer cancel()
	live := &liveCheck{path: store.Path(), grace: *grace, now: e.now}
	reported := map[string]string{} // source -> ERROR last reported
	start := e.now()
	var first, final transfer.View
	read := 0
	err = watchViewEvery(ctx, store, *poll, *timeout, recheck(*grace), func(v transfer.View) (bool, error) {
		if read++; read == 1 {
			first = v
		}
		final = v
		n := v.Count()
		if n[transfer.StateInvalid] > 0 {
			return false, filesInError(store.Path(), v, "the daemon will not copy them as they stand")
		}
		if n[transfer.StateError] > 0 && *failOnError {
			return false, filesInError(store.Path(), v, "--fail-on-error")
		}
		reportErrors(e, store.Path(), v, reported)
		if n[transfer.StatePending] == 0 && n[transfer.StateError] == 0 && (v.Done || v.Command != transfer.Run) {
			return true, nil
		}
		if err := live.check(v); err != nil {
			return false, fmt.Errorf("%w; the flush is not complete: %s", err, progressText(v))
		}
		return false, nil
	}, func(v transfer.View) string {
		return fmt.Sprintf("the flush of %s is not complete: %s", store.Path(), progressText(v))
	})
	if err != nil {
		return err
	}
	if !*quiet {
		fmt.Fprintf(e.stdout, "%s: flush complete: %s\n", store.Path(), summaryText(first, final, e.now().Sub(start), e.now()))
	}
	return nil
}

// reportErrors writes to stderr each file whose ERROR appeared, changed or
// cleared since the last call, remembering what it wrote in reported.
func reportErrors(e *env, path string, v transfer.View, reported map[string]string) {
	seen := make(map[string]bool, len(reported))
	for _, f := range v.Files {
		msg := ""
		if f.State() == transfer.StateError {
			msg = f.Error
		}
		seen[f.Src] = true
		if msg == reported[f.Src] {
			continue
		}
		if msg == "" {
			fmt.Fprintf(e.stderr, "scr-ctl wait: %s: %s: no longer in error\n", path, f.Src)
			delete(reported, f.Src)
			continue
		}
		fmt.Fprintf(e.stderr, "scr-ctl wait: %s: %s -> %s: ERROR %s (the daemon retries it; still waiting)\n", path, f.Src, f.Dest, msg)
		reported[f.Src] = msg
	}
	for src := range reported {
		if !seen[src] {
			delete(reported, src)
		}
	}
}

// filesInError returns an error naming every file of v in error or
// invalid, and why that ends the wait.
func filesInError(path string, v transfer.View, why string) error {
	var msgs []string
	for _, f := range v.Files {
		switch f.State() {
		case transfer.StateError:
			msgs = append(msgs, fmt.Sprintf("%s -> %s: ERROR %s", f.Src, f.Dest, f.Error))
		case transfer.StateInvalid:
			if f.Problem != nil {
				msgs = append(msgs, fmt.Sprintf("%s: malformed FILES entry: %v", f.Src, f.Problem))
			} else {
				msgs = append(msgs, fmt.Sprintf("%s: %s", f.Src, f.Error))
			}
		}
	}
	if len(msgs) == 1 {
		return fmt.Errorf("%s: %s (%s)", path, msgs[0], why)
	}
	return fmt.Errorf("%s: %d files in error (%s):\n  %s", path, len(msgs), why, strings.Join(msgs, "\n  "))
}

// progressText says how far a flush got.
func progressText(v transfer.View) string {
	size, written := v.Totals()
	n := v.Count()
	s := fmt.Sprintf("%d of %s complete, %s of %s written", n[transfer.StateComplete], count(len(v.Files), "file", "files"),
		units.IEC(float64(written)), units.IEC(float64(size)))
	if k := n[transfer.StateError] + n[transfer.StateInvalid]; k > 0 {
		s += fmt.Sprintf(", %d in error", k)
	}
	if v.Done {
		s += ", FLAG DONE"
	}
	if v.State != "" {
		s += ", STATE " + string(v.State)
	} else {
		s += ", no STATE recorded"
	}
	return s
}

// count writes n with the singular or plural noun: "1 file", "2 files".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// summaryText is wait's closing line: the flush's files and bytes in all,
// then what this flush wrote and how long it took, from the FLUSH record
// the daemon keeps (a flush resumed after a restart or a STOP wrote only
// what was left), and how long the wait took. Without a record, it gives
// the bytes written while the wait lasted, without a rate: they may be a
// commit of a copy that began long before the wait.
func summaryText(first, final transfer.View, elapsed time.Duration, now time.Time) string {
	size, written := final.Totals()
	_, before := first.Totals()
	s := fmt.Sprintf("%s, %s in all", count(len(final.Files), "file", "files"), units.IEC(float64(size)))
	if p, ok := final.Progress(now); ok {
		s += fmt.Sprintf("; this flush wrote %s in %s", units.IEC(float64(p.Written)), shortDuration(p.Elapsed))
		if avg, ok := p.Average(); ok && p.Written > 0 {
			s += fmt.Sprintf(", %s/s", units.IEC(avg))
		}
		if w := written - p.Written; w > 0 {
			s += fmt.Sprintf(" (%s were written before it)", units.IEC(float64(w)))
		}
	} else if copied := max(written-before, 0); copied > 0 {
		s += fmt.Sprintf("; %s written while waiting", units.IEC(float64(copied)))
	}
	return s + "; waited " + shortDuration(elapsed)
}

// shortDuration writes d to a tenth of a second below 10 s, as
// status.FormatDuration does above.
func shortDuration(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return status.FormatDuration(d)
}
