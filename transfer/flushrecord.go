package transfer

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/rate"
)

// Keys of the flush record, this project's extension at the top level of
// the transfer file (the library ignores keys it does not know and keeps
// them when it rewrites the file):
//
//	FLUSH
//	  STARTED <unix time in seconds, "%.3f">  when the daemon began running the flush
//	  WRITTEN <bytes>                         the total WRITTEN at that moment
//	  ENDED   <unix time in seconds, "%.3f">  when it set FLAG DONE; absent before
//
// Without it, a single reading of the file cannot tell how long a flush has
// taken or its average rate.
const (
	KeyFlush   = "FLUSH"
	KeyStarted = "STARTED"
	KeyEnded   = "ENDED"
	// FLUSH/WRITTEN uses KeyWritten.
)

// Flush is the daemon's record of the flush it runs or last ran.
type Flush struct {
	Started time.Time // when the daemon recorded STATE RUNNING for it; zero if no record
	Written int64     // the total WRITTEN (View.Totals) at Started
	Ended   time.Time // when the daemon set FLAG DONE; zero while under way
}

// BeginFlush records the start of a flush at at, the files then holding
// written bytes in all, replacing the record of an earlier flush. The daemon
// calls it in the locked update that records STATE RUNNING for a flush with
// files left to copy: a RUN after FLAG DONE, after a STOP, or found by a
// daemon just started.
func BeginFlush(t *hashfile.Tree, at time.Time, written int64) {
	r := hashfile.New()
	r.SetValue(KeyStarted, formatTime(at))
	r.SetUint(KeyWritten, uint64(max(written, 0)))
	t.SetTree(KeyFlush, r)
}

// EndFlush records the end of the flush under way at at, in the locked
// update that sets FLAG DONE, the files then holding written bytes in all.
// A RUN that found nothing to copy has no record under way (none, one that
// ended, or a malformed one): it gets one that begins and ends at at, so
// that the record never describes an earlier flush than the last FLAG DONE.
func EndFlush(t *hashfile.Tree, at time.Time, written int64) {
	var problems []error
	if f := readFlush(t, &problems); f.Started.IsZero() || !f.Ended.IsZero() || f.Started.After(at) {
		BeginFlush(t, at, written)
	}
	t.Get(KeyFlush).SetValue(KeyEnded, formatTime(at))
}

// readFlush reads the flush record of t; a malformed one is a problem and
// reads as no record.
func readFlush(t *hashfile.Tree, problems *[]error) Flush {
	r := t.Get(KeyFlush)
	if r == nil {
		return Flush{}
	}
	var f Flush
	var err error
	bad := func(e error) {
		if err == nil {
			err = e
		}
	}
	if f.Started, err = readTime(r, KeyStarted); err == nil && f.Started.IsZero() {
		bad(fmt.Errorf("no %s", KeyStarted))
	}
	var e error
	if f.Ended, e = readTime(r, KeyEnded); e != nil {
		bad(e)
	}
	switch w, ok, e := r.Uint(KeyWritten); {
	case e != nil:
		bad(e)
	case !ok:
		bad(fmt.Errorf("no %s", KeyWritten))
	case w > math.MaxInt64:
		bad(fmt.Errorf("%s %d is too large", KeyWritten, w))
	default:
		f.Written = int64(w)
	}
	if err == nil && !f.Ended.IsZero() && f.Ended.Before(f.Started) {
		bad(fmt.Errorf("%s before %s", KeyEnded, KeyStarted))
	}
	if err != nil {
		*problems = append(*problems, fmt.Errorf("%s: %w", KeyFlush, err))
		return Flush{}
	}
	return f
}

// readTime reads a time written by formatTime; zero if key is absent.
func readTime(r *hashfile.Tree, key string) (time.Time, error) {
	s, ok := r.Value(key)
	if !ok {
		if r.Has(key) {
			return time.Time{}, fmt.Errorf("%s: want one value, found %d", key, r.Get(key).Len())
		}
		return time.Time{}, nil
	}
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil || secs <= 0 || secs > 1e11 {
		return time.Time{}, fmt.Errorf("%s: %q is not a time in seconds since 1970", key, s)
	}
	return time.UnixMilli(int64(math.Round(secs * 1000))), nil
}

// formatTime writes at as unix seconds with milliseconds.
func formatTime(at time.Time) string {
	return strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)
}

// FlushProgress is how far the flush recorded in a view has come.
type FlushProgress struct {
	Started time.Time
	Ended   bool          // FLAG DONE ended it; false while under way
	Elapsed time.Duration // from Started to the end, or to now while under way
	Written int64         // bytes of WRITTEN gained since Started
}

// Average returns the bytes written per second over Elapsed; false when
// no time has passed.
func (p FlushProgress) Average() (float64, bool) {
	return rate.Average(p.Written, p.Elapsed), p.Elapsed > 0
}

// Progress returns the progress of the flush v records, as of now. ok is
// false when v describes no flush to measure: no record (no daemon of this
// project, or none has run the flush yet), a record that ended while FLAG
// DONE is no longer set (the library asked for a new flush, which the
// daemon has not begun yet), or a record of a flush that did not end while
// STATE is not RUNNING (stopped, or its daemon is gone).
func (v View) Progress(now time.Time) (p FlushProgress, ok bool) {
	f := v.Flush
	if f.Started.IsZero() {
		return FlushProgress{}, false
	}
	p.Started = f.Started
	switch {
	case !f.Ended.IsZero() && v.Done:
		p.Ended, p.Elapsed = true, f.Ended.Sub(f.Started)
	case f.Ended.IsZero() && v.State == Running:
		p.Elapsed = max(now.Sub(f.Started), 0)
	default:
		return FlushProgress{}, false
	}
	_, written := v.Totals()
	p.Written = max(written-f.Written, 0)
	return p, true
}
