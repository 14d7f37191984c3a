package status

import (
	"fmt"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/rate"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Schema is the version of the JSON form; it changes only when a field
// changes meaning or disappears.
const Schema = 1

// Report is one reading of a transfer file: what scr-ctl status shows, and
// its JSON form.
type Report struct {
	Schema       int       `json:"schema"`
	TransferFile string    `json:"transfer_file"`
	Time         time.Time `json:"time"`     // when the file was read
	State        string    `json:"state"`    // RUNNING, STOPPED, EXITING; "" if not recorded
	Command      string    `json:"command"`  // RUN, STOP, EXIT, another value as written, or ""
	Done         bool      `json:"done"`     // FLAG DONE is set
	Complete     bool      `json:"complete"` // FLAG DONE and every file complete
	BW           float64   `json:"bw"`       // bytes per second; 0 = unlimited
	Percent      float64   `json:"percent"`  // 0 = unlimited
	// BWKept and PercentKept: the value in the file is unusable, so the
	// daemon keeps the limit it had in force (BW, Percent are then 0);
	// Problems says what is wrong (transfer.ReadLimits).
	BWKept      bool   `json:"bw_kept,omitempty"`
	PercentKept bool   `json:"percent_kept,omitempty"`
	Totals      Totals `json:"totals"`
	Files       []File `json:"files"`
	// Flush times the flush from the daemon's record (FLUSH); null when
	// the file holds none that describes the flush it asks for.
	Flush    *Flush   `json:"flush"`
	Problems []string `json:"problems,omitempty"` // malformed top-level values
	// Daemon says whether a daemon serves the file; null when not probed.
	Daemon *Daemon `json:"daemon"`
}

// Daemon is whether a daemon serves the transfer file, from its instance
// lock (Probe).
type Daemon struct {
	Serving bool `json:"serving"`
	PID     int  `json:"pid,omitempty"` // the serving daemon's PID, when known
	// Since is when the serving daemon took its instance lock (its start);
	// null when no daemon serves the file or the time is not known.
	Since  *time.Time `json:"since"`
	Reason string     `json:"reason"` // what the answer rests on
}

// SetLiveness records lv, the probe of the daemon, in r.
func (r *Report) SetLiveness(lv Liveness) {
	d := &Daemon{Serving: lv.Serving, PID: lv.PID, Reason: lv.Reason}
	if lv.Serving && !lv.Since.IsZero() {
		since := lv.Since.UTC()
		d.Since = &since
	}
	r.Daemon = d
}

// Flush is how long the flush has run and its average rate, from the
// daemon's record in the transfer file (transfer.Flush): a single reading
// tells them.
type Flush struct {
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended"`           // when FLAG DONE was set; null while under way
	Elapsed float64    `json:"elapsed_seconds"` // from started to ended, or to the reading
	Written int64      `json:"written"`         // bytes of WRITTEN gained since started
	Average *float64   `json:"average_rate"`    // written / elapsed; null when no time has passed
}

// Totals sums the sound files of a reading.
type Totals struct {
	Files    int   `json:"files"`
	Complete int   `json:"complete"`
	Pending  int64 `json:"pending"` // bytes left
	InError  int   `json:"in_error"`
	Size     int64 `json:"size"`
	Written  int64 `json:"written"`
	// Rate is the smoothed rate (rate.Meter) of WRITTEN; null when unknown.
	Rate *float64 `json:"rate"`
	ETA  *float64 `json:"eta_seconds"` // seconds left at Rate; null when unknown
	// Elapsed is the time since the first reading of a watch; Average the
	// bytes written per second over it. Null for a single reading.
	Elapsed *float64 `json:"elapsed_seconds"`
	Average *float64 `json:"average_rate"`
}

// File is one FILES entry of a reading.
type File struct {
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

// Meter keeps the rate meters of successive readings of one transfer
// file: one per file and one for the total.
type Meter struct {
	files map[string]*rate.Meter // by source, destination and size
	total *rate.Meter
}

// NewMeter returns a Meter for a series of readings.
func NewMeter() *Meter { return &Meter{files: map[string]*rate.Meter{}, total: rate.New(0)} }

// Build turns a reading of the transfer file at time at into a report,
// feeding m (nil: a single reading, without rates).
func Build(path string, at time.Time, t *hashfile.Tree, m *Meter) Report {
	v := transfer.Read(t)
	r := Report{
		Schema: Schema, TransferFile: path, Time: at,
		State: string(v.State), Command: string(v.Command), Done: v.Done,
		BW: v.BW, Percent: v.Percent, BWKept: v.BWBad, PercentKept: v.PercentBad, Files: []File{},
	}
	if v.Unknown != "" {
		r.Command = v.Unknown
	}
	for _, p := range v.Problems {
		r.Problems = append(r.Problems, p.Error())
	}
	seen := map[string]bool{}
	for _, f := range v.Files {
		fs := fileOf(f)
		if f.Problem == nil {
			r.Totals.Files++
			if fs.State == transfer.StateComplete {
				r.Totals.Complete++
			}
			if m != nil {
				m.observeFile(&fs, at, v.BW, seen)
			}
		}
		if fs.State == transfer.StateError || fs.State == transfer.StateInvalid {
			r.Totals.InError++
		}
		r.Files = append(r.Files, fs)
	}
	r.Flush = flushOf(v, at)
	r.Totals.Size, r.Totals.Written = v.Totals()
	r.Totals.Pending = r.Totals.Size - r.Totals.Written
	n := v.Count()
	r.Complete = v.Done && n[transfer.StateComplete] == len(v.Files)
	if m != nil {
		m.observeTotal(&r.Totals, at, v.BW, seen)
	}
	return r
}

// fileOf is the report of one FILES entry, without rates.
func fileOf(f transfer.File) File {
	fs := File{Source: f.Src, Destination: f.Dest, Size: f.Size, Written: f.Written, Error: f.Error, State: f.State(),
		Warning: f.Warning}
	if f.Problem != nil && fs.Error == "" {
		fs.Error = "malformed FILES entry: " + f.Problem.Error()
	}
	if f.HasCRC && fs.State == transfer.StateComplete {
		fs.CRC = hashfile.FormatCRC(f.CRC)
	}
	return fs
}

// observeFile feeds the meter of fs, a sound entry read at at, and sets
// its rate and time left (at most bw); seen collects the meters in use.
func (m *Meter) observeFile(fs *File, at time.Time, bw float64, seen map[string]bool) {
	key := fs.Source + "\x00" + fs.Destination + "\x00" + fmt.Sprint(fs.Size)
	seen[key] = true
	fm := m.files[key]
	if fm == nil {
		fm = rate.New(0)
		m.files[key] = fm
	}
	written := min(fs.Written, fs.Size)
	fm.Observe(at, written)
	fs.Rate = rateOf(fm, at)
	fs.ETA = etaOf(fm, at, fs.Size-written, bw)
}

// observeTotal feeds the total's meter and sets the totals' rate, time
// left, elapsed time and average; meters of entries not seen in this
// reading are dropped.
func (m *Meter) observeTotal(t *Totals, at time.Time, bw float64, seen map[string]bool) {
	for k := range m.files {
		if !seen[k] {
			delete(m.files, k)
		}
	}
	m.total.Observe(at, t.Written)
	t.Rate = rateOf(m.total, at)
	t.ETA = etaOf(m.total, at, t.Pending, bw)
	if avg, ok := m.total.Average(); ok {
		el := m.total.Elapsed(at).Seconds()
		t.Elapsed, t.Average = &el, &avg
	}
}

// flushOf times the flush v records, as of at; nil without a record.
func flushOf(v transfer.View, at time.Time) *Flush {
	p, ok := v.Progress(at)
	if !ok {
		return nil
	}
	f := &Flush{Started: p.Started.UTC(), Elapsed: p.Elapsed.Seconds(), Written: p.Written}
	if p.Ended {
		end := p.Started.Add(p.Elapsed).UTC()
		f.Ended = &end
	}
	if avg, ok := p.Average(); ok {
		f.Average = &avg
	}
	return f
}

func rateOf(m *rate.Meter, at time.Time) *float64 {
	r, ok := m.Rate(at)
	if !ok {
		return nil
	}
	return &r
}

// etaOf returns the seconds needed for left bytes at m's rate, at most
// bw when bw > 0 (rate.Meter.ETA); nil when unknown.
func etaOf(m *rate.Meter, at time.Time, left int64, bw float64) *float64 {
	d, ok := m.ETA(at, left, bw)
	if !ok {
		return nil
	}
	s := d.Seconds()
	return &s
}
