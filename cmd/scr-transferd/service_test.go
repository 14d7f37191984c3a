package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// bins is this package's once-per-process build of the daemon, with the
// race detector when the tests run with it, built the first time a test
// asks for it (the tests that run it skip under -short).
var bins = testenv.NewBinaries(testenv.Build{Commands: []string{testenv.Daemon}, Race: testenv.Race})

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins)) }

// notifications listens on a unix datagram socket, as systemd does for
// NOTIFY_SOCKET, and delivers every datagram received.
func notifications(t *testing.T, path string) <-chan string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return ch
}

// await returns the first notification for which match is true, failing
// the test after timeout.
func await(t *testing.T, ch <-chan string, timeout time.Duration, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case msg, ok := <-ch:
			if !ok {
				t.Fatalf("notification socket closed while waiting for %s", what)
			}
			if match(msg) {
				return msg
			}
		case <-deadline:
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

func readMetrics(path string) (map[string]*dto.MetricFamily, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(b))
}

func gauge(fams map[string]*dto.MetricFamily, name, state string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		match := state == ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == state {
				match = true
			}
		}
		if !match {
			continue
		}
		if f.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue(), true
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// TestServiceManners runs the real daemon binary under a NOTIFY_SOCKET and
// a watchdog, drives a flush through the transfer file, and checks what
// systemd and the metrics collector would see.
func TestServiceManners(t *testing.T) {
	testenv.Long(t, "builds and runs the daemon")
	dir := t.TempDir()
	bin := bins.Path(t, testenv.Daemon)
	sock := filepath.Join(dir, "notify.sock")
	notes := notifications(t, sock)
	tf := filepath.Join(dir, "ctl", "transfer.scrinfo")
	prom := filepath.Join(dir, "scr.prom")
	src := filepath.Join(dir, "cache", "ckpt")
	dst := filepath.Join(dir, "pfs", "ckpt")
	const size = 2 << 20
	for _, d := range []string{filepath.Dir(src), filepath.Dir(tf)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(src, bytes.Repeat([]byte("checkpoint"), size/10+1)[:size], 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--poll=100ms", "--log-format=json", "--metrics-file="+prom, tf)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")
	d := testenv.Start(t, cmd)

	// READY=1 comes only once the first STATE is in the transfer file.
	ready := await(t, notes, 20*time.Second, "READY=1", func(m string) bool { return strings.Contains(m, "READY=1") })
	if !strings.Contains(ready, "STATUS=STOPPED") {
		t.Errorf("READY without the STOPPED status: %q", ready)
	}
	store := hashfile.NewStore(tf, hashfile.Flock)
	tree, err := store.Read()
	if err != nil {
		t.Fatalf("READY=1 sent but the transfer file cannot be read: %v", err)
	}
	if st := transfer.Read(tree).State; st != transfer.Stopped {
		t.Fatalf("READY=1 sent with STATE %q in the transfer file, want STOPPED", st)
	}

	// Watchdog pings at half of WATCHDOG_USEC.
	start := time.Now()
	for range 3 {
		await(t, notes, 5*time.Second, "WATCHDOG=1", func(m string) bool { return m == "WATCHDOG=1" })
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("3 watchdog pings in %v: faster than every 200 ms", el)
	}

	// A throttled flush: STATUS says RUNNING with the file, then STOPPED.
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		transfer.AddFile(tr, src, dst, size)
		transfer.SetBW(tr, 1<<20)
		transfer.SetCommand(tr, transfer.Run)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	running := await(t, notes, 20*time.Second, "STATUS=RUNNING", func(m string) bool { return strings.HasPrefix(m, "STATUS=RUNNING") })
	t.Logf("%s", running)
	await(t, notes, 30*time.Second, "STATUS=STOPPED after the flush", func(m string) bool {
		return strings.HasPrefix(m, "STATUS=STOPPED") && strings.Contains(m, "0 B pending")
	})
	tree, err = store.Read()
	if err != nil {
		t.Fatal(err)
	}
	if v := transfer.Read(tree); !v.Done || v.HasPending() {
		t.Fatalf("STATUS=STOPPED, 0 B pending, but the transfer file says done=%v pending=%v", v.Done, v.HasPending())
	}

	// The metrics file follows within a second or so.
	var w, p, st, last float64
	if !testenv.Until(10*time.Second, func() bool {
		var fams map[string]*dto.MetricFamily
		if fams, err = readMetrics(prom); err != nil {
			return false
		}
		w, _ = gauge(fams, "scr_transferd_bytes_written_total", "")
		p, _ = gauge(fams, "scr_transferd_bytes_pending", "")
		st, _ = gauge(fams, "scr_transferd_state", "STOPPED")
		last, _ = gauge(fams, "scr_transferd_last_success_timestamp_seconds", "")
		return w == size && p == 0 && st == 1 && last > float64(start.Unix())
	}) {
		if err != nil {
			t.Fatalf("metrics file: %v", err)
		}
		t.Fatalf("metrics after the flush: written %v pending %v STOPPED %v last success %v", w, p, st, last)
	}

	// SIGTERM: STOPPING=1, a clean exit, and no metrics file left.
	d.Signal(syscall.SIGTERM)
	await(t, notes, 20*time.Second, "STOPPING=1", func(m string) bool { return m == "STOPPING=1" })
	d.Wait(20 * time.Second)
	if err := d.Err(); err != nil {
		t.Fatalf("daemon exit: %v", err)
	}
	// The instance has ended: node_exporter must stop exporting it.
	if _, err := os.Stat(prom); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("metrics file still there after the daemon exited (%v)", err)
	}
}

func TestStatusLine(t *testing.T) {
	for _, tc := range []struct {
		st   daemon.Status
		want string
	}{
		{daemon.Status{State: transfer.Stopped}, "STOPPED: idle; 0 B pending"},
		{daemon.Status{State: transfer.Running, File: "/c/a", Rate: 3 << 20, BytesPending: 5 << 30, FilesInError: 2},
			"RUNNING: copying /c/a at 3.00 MiB/s; 5.00 GiB pending; 2 files in error"},
		{daemon.Status{State: transfer.Running, BytesPending: 1536, FilesInError: 1},
			"RUNNING: idle; 1.50 KiB pending; 1 file in error"},
		{daemon.Status{State: transfer.Running, File: "/c/a", LockWaitSince: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
			"RUNNING: waiting for the transfer-file lock held since 2026-01-02T03:04:05Z; 0 B pending"},
	} {
		if got := statusLine(tc.st); got != tc.want {
			t.Errorf("statusLine(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}
