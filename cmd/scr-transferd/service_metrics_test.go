package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/metrics"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestMetricsWriteFailureLoggedOnce: a metrics directory the daemon cannot
// write (Debian's /var/lib/prometheus/node-exporter is root:root 0755)
// stays so; the service tries again at each tick with news, and must say
// so once, not every second.
func TestMetricsWriteFailureLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	prom := filepath.Join(t.TempDir(), "missing-dir", "scr.prom")
	s := startService(zap.New(core), "/dev/shm/u/scr.1/transfer.scrinfo", prom)
	defer s.close()
	n := int64(0)
	if !testenv.Until(2*time.Minute, func() bool {
		// A new snapshot each time, so that every tick has news to write.
		s.onStatus(daemon.Status{State: transfer.Running, BytesCopied: n})
		n++
		if w := logs.FilterLevelExact(zapcore.WarnLevel); w.Len() > 1 {
			t.Fatalf("%d warnings for one unwritable metrics directory, want 1; the last: %v", w.Len(), w.All()[w.Len()-1])
		}
		return logs.FilterMessage("metrics file still not written").Len() >= 3
	}) {
		t.Fatalf("fewer than 4 write attempts within 2 minutes; %d log entries", logs.Len())
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Fatalf("%d warnings for one unwritable metrics directory, want 1: %v", n, logs.FilterLevelExact(zapcore.WarnLevel).All())
	}
	w := logs.FilterLevelExact(zapcore.WarnLevel).All()[0]
	if w.ContextMap()["file"] != prom {
		t.Errorf("the warning does not name the file: %v", w.ContextMap())
	}

	// Once the directory exists the next write succeeds, and says so.
	if err := os.Mkdir(filepath.Dir(prom), 0o755); err != nil {
		t.Fatal(err)
	}
	if !testenv.Until(2*time.Minute, func() bool {
		s.onStatus(daemon.Status{State: transfer.Running, BytesCopied: -1})
		return logs.FilterMessage("metrics file written again").Len() > 0
	}) {
		t.Fatal("no successful write after the directory was made")
	}
	if _, err := os.Stat(prom); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsFileRemovedWhenTheInstanceEnds: node_exporter must stop
// exporting a finished daemon's figures.
func TestMetricsFileRemovedWhenTheInstanceEnds(t *testing.T) {
	prom := filepath.Join(t.TempDir(), "scr.prom")
	s := startService(zap.NewNop(), "/dev/shm/u/scr.1/transfer.scrinfo", prom)
	s.onStatus(daemon.Status{State: transfer.Stopped})
	if !testenv.Until(2*time.Minute, func() bool { _, err := os.Stat(prom); return err == nil }) {
		t.Fatal("the metrics file was never written")
	}
	s.onStatus(daemon.Status{State: transfer.Exiting})
	s.close()
	if _, err := os.Stat(prom); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("metrics file still there after the instance ended (%v)", err)
	}
}

// TestMetricsFileOfAnotherProcessKept: a daemon that never wrote the file
// (refused, say, because another one serves the transfer file) leaves it.
func TestMetricsFileOfAnotherProcessKept(t *testing.T) {
	prom := filepath.Join(t.TempDir(), "scr.prom")
	if err := os.WriteFile(prom, []byte("# the running daemon's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startService(zap.NewNop(), "/dev/shm/u/scr.1/transfer.scrinfo", prom)
	s.close()
	if _, err := os.Stat(prom); err != nil {
		t.Fatalf("another process's metrics file was removed: %v", err)
	}
}

// TestMetricsFileNamesLimitsBuildAndTime: the file the service writes
// parses with Prometheus's text parser and carries the limits in force,
// the build and the time it was written, which an alert compares with
// time().
func TestMetricsFileNamesLimitsBuildAndTime(t *testing.T) {
	prom := filepath.Join(t.TempDir(), "scr.prom")
	build := metrics.Build{Version: "v9.9.9", Revision: "feedface", GoVersion: "go1.26.8"}
	s := startServiceBuild(zap.NewNop(), "/dev/shm/u/scr.1/transfer.scrinfo", prom, build)
	defer s.close()
	before := time.Now()
	s.onStatus(daemon.Status{State: transfer.Running, BWLimit: 8 << 20, PercentLimit: 25})
	var fams map[string]*dto.MetricFamily
	if !testenv.Until(2*time.Minute, func() bool {
		b, err := os.ReadFile(prom)
		if err != nil {
			return false
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		if fams, err = p.TextToMetricFamilies(bytes.NewReader(b)); err != nil {
			t.Fatalf("Prometheus's parser rejects the file: %v\n%s", err, b)
		}
		return true
	}) {
		t.Fatal("the metrics file was never written")
	}
	gauge := func(name string) (float64, map[string]string) {
		t.Helper()
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Fatalf("%s: %v", name, f)
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		return m.GetGauge().GetValue(), labels
	}
	if v, _ := gauge("scr_transferd_bw_limit_bytes_per_second"); v != 8<<20 {
		t.Errorf("BW limit %v", v)
	}
	if v, _ := gauge("scr_transferd_percent_limit"); v != 25 {
		t.Errorf("PERCENT limit %v", v)
	}
	if v, l := gauge("scr_transferd_build_info"); v != 1 || l["version"] != "v9.9.9" || l["revision"] != "feedface" || l["goversion"] != "go1.26.8" {
		t.Errorf("build_info %v %v", v, l)
	}
	v, _ := gauge("scr_transferd_last_update_timestamp_seconds")
	if at := time.Unix(0, int64(v*1e9)); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("last update %v; want between %v and now", at, before)
	}
}
