package metrics

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads an exposition with Prometheus's own text-format parser.
func parse(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Prometheus's parser rejects the exposition: %v\n%s", err, b)
	}
	return fams
}

// value returns the value of the series of name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric family %s", name)
	}
	var found []float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			found = append(found, m.GetCounter().GetValue())
		case dto.MetricType_GAUGE:
			found = append(found, m.GetGauge().GetValue())
		default:
			t.Fatalf("%s has type %v", name, f.GetType())
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, want, len(found))
	}
	return found[0]
}

func TestExpositionParsesWithEveryFamily(t *testing.T) {
	// A transfer-file path with every character the label escaping handles.
	tf := "/dev/shm/user \"x\"\\y\nz/transfer.scrinfo"
	m := NewTextfile(filepath.Join(t.TempDir(), "scr.prom"), tf, Build{Version: "v1.2.3", Revision: "0123abc", GoVersion: "go1.26.8"})
	last := time.Date(2026, 3, 1, 12, 0, 0, 500e6, time.UTC)
	s := Sample{State: "RUNNING", BytesCopied: 300, BytesDurable: 400, BytesPending: 900, Rate: 12.5, FilesInError: 2, FilesWarned: 3,
		ThrottleSleeps: 7, ThrottleSlept: 1500 * time.Millisecond, LastSuccess: last,
		BWLimit: 20 << 20, PercentLimit: 150, Updated: last.Add(time.Minute)}
	fams := parse(t, m.Render(s))
	lbl := map[string]string{"transfer_file": tf}
	types := map[string]dto.MetricType{
		"scr_transferd_bytes_written_total":            dto.MetricType_COUNTER,
		"scr_transferd_bytes_durable":                  dto.MetricType_GAUGE,
		"scr_transferd_bytes_pending":                  dto.MetricType_GAUGE,
		"scr_transferd_rate_bytes_per_second":          dto.MetricType_GAUGE,
		"scr_transferd_state":                          dto.MetricType_GAUGE,
		"scr_transferd_files_in_error":                 dto.MetricType_GAUGE,
		"scr_transferd_files_with_warnings":            dto.MetricType_GAUGE,
		"scr_transferd_throttle_sleeps_total":          dto.MetricType_COUNTER,
		"scr_transferd_throttle_sleep_seconds_total":   dto.MetricType_COUNTER,
		"scr_transferd_last_success_timestamp_seconds": dto.MetricType_GAUGE,
		"scr_transferd_last_update_timestamp_seconds":  dto.MetricType_GAUGE,
		"scr_transferd_bw_limit_bytes_per_second":      dto.MetricType_GAUGE,
		"scr_transferd_percent_limit":                  dto.MetricType_GAUGE,
		"scr_transferd_build_info":                     dto.MetricType_GAUGE,
	}
	if len(fams) != len(types) {
		t.Errorf("%d families, want %d", len(fams), len(types))
	}
	for name, typ := range types {
		f := fams[name]
		if f == nil || f.GetType() != typ || f.GetHelp() == "" {
			t.Errorf("%s: family %v, want type %v with help", name, f, typ)
		}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"scr_transferd_bytes_written_total", lbl, 300},
		{"scr_transferd_bytes_durable", lbl, 400},
		{"scr_transferd_bytes_pending", lbl, 900},
		{"scr_transferd_rate_bytes_per_second", lbl, 12.5},
		{"scr_transferd_state", map[string]string{"transfer_file": tf, "state": "RUNNING"}, 1},
		{"scr_transferd_files_with_warnings", lbl, 3},
		{"scr_transferd_state", map[string]string{"transfer_file": tf, "state": "STOPPED"}, 0},
		{"scr_transferd_state", map[string]string{"transfer_file": tf, "state": "EXITING"}, 0},
		{"scr_transferd_files_in_error", lbl, 2},
		{"scr_transferd_throttle_sleeps_total", lbl, 7},
		{"scr_transferd_throttle_sleep_seconds_total", lbl, 1.5},
		{"scr_transferd_last_success_timestamp_seconds", lbl, float64(last.UnixNano()) / 1e9},
		{"scr_transferd_last_update_timestamp_seconds", lbl, float64(last.Add(time.Minute).UnixNano()) / 1e9},
		{"scr_transferd_bw_limit_bytes_per_second", lbl, 20 << 20},
		{"scr_transferd_percent_limit", lbl, 0}, // 150 is no limit
		{"scr_transferd_build_info", map[string]string{"transfer_file": tf, "version": "v1.2.3", "revision": "0123abc", "goversion": "go1.26.8"}, 1},
	} {
		if got := value(t, fams, tc.name, tc.labels); math.Abs(got-tc.want) > 1e-9*math.Max(1, tc.want) {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

func TestUpdateReplacesTheFileAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scr-transferd.prom")
	m := NewTextfile(path, "/t", Build{})
	for _, st := range []string{"STOPPED", "RUNNING", "EXITING"} {
		if err := m.Update(Sample{State: st}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fams := parse(t, b)
		if v := value(t, fams, "scr_transferd_state", map[string]string{"state": st}); v != 1 {
			t.Fatalf("state %s: %v", st, v)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 so that the collector can read it", fi.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

func TestWriteAtomicReportsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "x.prom")
	err := WriteAtomic(path, []byte("x"))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(path)) {
		t.Fatalf("error %v does not name %s", err, path)
	}
}

func TestRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scr.prom")
	tf := NewTextfile(path, "/dev/shm/u/scr.1/transfer.scrinfo", Build{})
	if err := tf.Update(Sample{State: "EXITING"}); err != nil {
		t.Fatal(err)
	}
	if err := tf.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if err := tf.Remove(); err != nil {
		t.Errorf("removing a file already gone: %v", err)
	}
}

// TestDue: the file is written with news, and without news once Refresh
// has passed since the last write, so that the update timestamp of a live
// daemon never grows older than Refresh plus a tick.
func TestDue(t *testing.T) {
	t0 := time.Unix(1.8e9, 0)
	for _, tc := range []struct {
		news      bool
		last, now time.Time
		want      bool
	}{
		{news: true, last: t0, now: t0.Add(time.Second), want: true},
		{news: false, last: t0, now: t0.Add(time.Second), want: false},
		{news: false, last: t0, now: t0.Add(Refresh - time.Nanosecond), want: false},
		{news: false, last: t0, now: t0.Add(Refresh), want: true},
		{news: false, now: t0, want: true},
	} {
		if got := Due(tc.news, tc.last, tc.now); got != tc.want {
			t.Errorf("Due(%v, %v, %v) = %v; want %v", tc.news, tc.last, tc.now, got, tc.want)
		}
	}
}
