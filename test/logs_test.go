package test

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestLogsConsole: a throttled flush logged for people: progress lines
// while the file copies, the BW change, debug lines for the locked reads,
// the commits and the throttle's pauses, sizes and rates in IEC units, and
// a completion summary with totals.
func TestLogsConsole(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 4*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, 1<<20) // 4 s for the file
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start("--log-level=debug", "--progress-interval=200ms", "--sync-interval=100ms")
	d.WaitLog("limits\t{\"bw\": \"1.00 MiB/s\", \"percent\": \"unlimited\"}", settle)
	d.WaitLog("\tprogress\t{\"src\": \""+p+"\"", settle)
	mark := d.LogMark()
	n.library(func(t *hashfile.Tree) { transfer.SetBW(t, 2<<20) })
	d.WaitLogAfter(mark, settle, "limits changed", `"bw": "2.00 MiB/s"`)
	n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("a.ckpt"), data)
	d.WaitLog("flush complete: FLAG DONE set", settle)

	log := d.Log.String()
	for _, want := range []string{
		`copy	{"src": "` + p + `", "dest": "` + n.dest("a.ckpt") + `", "size": "4.00 MiB", "from": "0 B"}`,
		`"written": "`, `"percent": `, `"rate": "`, `"eta": "`, // progress
		"DEBUG\ttransfer file read under its lock\t{\"lock_wait\": ",
		"DEBUG\tcommitted WRITTEN\t{\"src\": \"" + p + "\", \"written\": ",
		"DEBUG\tthrottle paused the copy\t{\"pauses\": ",
		`flushed	{"src": "` + p,
		`flush complete: FLAG DONE set	{"files": 1, "bytes": "4.00 MiB", "copied": "4.00 MiB", "elapsed": "`,
		`"average_rate": "`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	for _, bad := range []string{"mb_per_s", "library's EXIT", `"size": 4194304`} {
		if strings.Contains(log, bad) {
			t.Errorf("log says %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", log)
	}
}

// TestLogsJSON: the same events in JSON carry raw numbers: bytes, bytes
// per second, seconds.
func TestLogsJSON(t *testing.T) {
	n := newNode(t)
	p, _ := n.checkpoint("a.ckpt", 2*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, 1<<20)
		transfer.SetCommand(t, transfer.Run)
	})
	d := n.start("--log-format=json", "--progress-interval=200ms")
	n.waitFor("DONE", settle, done)
	d.WaitLog("flush complete", settle)
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Exit) })
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d", code)
	}

	seen := map[string]map[string]any{}
	for _, rec := range jsonRecords(t, d.Log.String()) {
		msg, _ := rec["msg"].(string)
		seen[msg] = rec
	}
	for msg, want := range map[string]map[string]any{
		"limits":                        {"bw": float64(1 << 20), "percent": "unlimited"},
		"copy":                          {"size": float64(2 * mib), "from": 0.0},
		"flushed":                       {"size": float64(2 * mib)},
		"flush complete: FLAG DONE set": {"files": 1.0, "bytes": float64(2 * mib), "copied": float64(2 * mib)},
	} {
		rec, ok := seen[msg]
		if !ok {
			t.Errorf("no %q line", msg)
			continue
		}
		for k, v := range want {
			if rec[k] != v {
				t.Errorf("%q: %s = %#v, want %#v", msg, k, rec[k], v)
			}
		}
	}
	for msg, keys := range map[string][]string{
		"progress":                      {"written", "size", "rate"},
		"flushed":                       {"elapsed", "average_rate"},
		"flush complete: FLAG DONE set": {"elapsed", "average_rate"},
	} {
		for _, k := range keys {
			if _, ok := seen[msg][k].(float64); !ok {
				t.Errorf("%q: %s = %#v, want a number", msg, k, seen[msg][k])
			}
		}
	}
	if _, ok := seen["exiting on COMMAND EXIT"]; !ok {
		t.Error(`no "exiting on COMMAND EXIT" line`)
	}
}

// TestLogsBatchAsAWhole: a batch of many small files is logged as a whole,
// one info line per batch that counts its files, and not two lines per
// file: a flush of 100,000 files would write 200,000 lines to the journal.
func TestLogsBatchAsAWhole(t *testing.T) {
	const files = 40
	n := newNode(t)
	data := n.smallFilesToRun(files, 1024)
	d := n.start("--log-format=json")
	checkFlushed(t, n.waitFor("DONE", settle, done), data)
	d.WaitLog("flush complete", settle)
	count := map[string]int{}
	var batched float64
	for _, rec := range jsonRecords(t, d.Log.String()) {
		msg, _ := rec["msg"].(string)
		count[msg]++
		if msg == "flushed a batch of files" {
			f, _ := rec["files"].(float64)
			batched += f
		}
	}
	if count["copy"] != 0 || count["flushed"] != 0 {
		t.Errorf("%d copy and %d flushed lines at info for a batch of %d files, want none", count["copy"], count["flushed"], files)
	}
	if batched != files || count["flushed a batch of files"] == 0 {
		t.Errorf("the batch lines count %v files in %d lines, want %d", batched, count["flushed a batch of files"], files)
	}
}

// jsonRecords decodes a JSON log, one record per line, failing the test on
// a line that is not JSON.
func jsonRecords(t *testing.T, log string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Text())
		}
		recs = append(recs, rec)
	}
	return recs
}
