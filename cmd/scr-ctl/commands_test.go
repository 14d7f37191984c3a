package main

import (
	"context"
	"encoding/json"
	"github.com/scr-transferd/scr-transferd/cache/cachetest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
	"github.com/scr-transferd/scr-transferd/transfer"
)

func TestUsageAndHelp(t *testing.T) {
	ctx := context.Background()
	tf := filepath.Join(t.TempDir(), "t.scrinfo")
	for _, tc := range []struct {
		args []string
		code int
		in   string // expected in stderr
	}{
		{nil, exitUsage, "usage: scr-ctl COMMAND"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"wait"}, exitUsage, "want exactly one TRANSFERFILE"},
		{[]string{"wait", "--timeout=-1s", tf}, exitUsage, "--timeout -1s: must not be negative"},
		{[]string{"run", "--timeout=1s", tf}, exitUsage, "--timeout only applies with --wait"},
		{[]string{"status", "--bogus", tf}, exitUsage, "unknown flag --bogus"},
		{[]string{"set", tf, "speed", "3"}, exitUsage, `unknown setting "speed"`},
		{[]string{"set", tf, "bw", "fast"}, exitUsage, "not a byte count"},
		{[]string{"set", tf, "percent", "120"}, exitUsage, "not a number from 0 to 100"},
		{[]string{"add", tf, "a"}, exitUsage, "want TRANSFERFILE SRC DEST"},
		{[]string{"add", "--size=1.5", tf, "a", "b"}, exitUsage, "whole number of bytes"},
		{[]string{"print", "--locking=lockf", tf}, exitUsage, "unknown locking"},
		{[]string{"verify"}, exitUsage, "want at least one FILE"},
		{[]string{"demo", "extra"}, exitUsage, "want no arguments"},
		{[]string{"add", tf, filepath.Join(t.TempDir(), "missing"), "b"}, exitFailure, "missing: no such file or directory"},
		{[]string{"status", filepath.Join(t.TempDir(), "none.scrinfo")}, exitFailure, "none.scrinfo: no such transfer file"},
	} {
		r := inproc(ctx, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.in) {
			t.Errorf("scr-ctl %q: want exit %d with %q, got %s", tc.args, tc.code, tc.in, r)
		}
	}
	for name := range commands() {
		r := inproc(ctx, name, "--help")
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "usage: scr-ctl "+name+" ") || r.stderr != "" {
			t.Errorf("scr-ctl %s --help: %s", name, r)
		}
	}
	if r := inproc(ctx, "--help"); r.code != exitOK || !strings.Contains(r.stdout, "status") {
		t.Errorf("scr-ctl --help: %s", r)
	}
}

func TestAddAndSetWriteWhatTheLibraryWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tf := filepath.Join(dir, "t.scrinfo")
	src := filepath.Join(dir, "a.ckpt")
	writeFile(t, src, 12345, 1)
	t.Chdir(dir)
	wantCode(t, inproc(ctx, "add", tf, "a.ckpt", "pfs/a.ckpt"), 0, "add with relative paths")
	wantCode(t, inproc(ctx, "add", "--size=2K", tf, "later.ckpt", "/pfs/later.ckpt"), 0, "add --size")
	wantCode(t, inproc(ctx, "set", tf, "bw", "50MB"), 0, "set bw")
	wantCode(t, inproc(ctx, "set", tf, "percent", "12.5"), 0, "set percent")
	tree, err := hashfile.NewStore(tf, hashfile.Flock).Read()
	if err != nil {
		t.Fatal(err)
	}
	want := "  FILES\n" +
		"    " + src + "\n      DESTINATION\n        " + filepath.Join(dir, "pfs", "a.ckpt") + "\n      SIZE\n        12345\n      WRITTEN\n        0\n" +
		"    " + filepath.Join(dir, "later.ckpt") + "\n      DESTINATION\n        /pfs/later.ckpt\n      SIZE\n        2048\n      WRITTEN\n        0\n" +
		"  BW\n    52428800.000000\n  PERCENT\n    12.500000\n"
	if got := hashfile.Format(tree, 2); got != want {
		t.Errorf("transfer file:\n%s\nwant:\n%s", got, want)
	}
}

func TestRunClearsDone(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "t.scrinfo")
	store := hashfile.NewStore(tf, hashfile.Flock)
	if _, _, err := store.Update(func(tr *hashfile.Tree) error {
		transfer.SetDone(tr, true)
		transfer.SetState(tr, transfer.Stopped)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, inproc(context.Background(), "run", tf), 0, "run")
	tree, err := store.Read()
	if err != nil {
		t.Fatal(err)
	}
	v := transfer.Read(tree)
	if v.Done || v.Command != transfer.Run || v.State != transfer.Stopped {
		t.Errorf("after run: done %v command %q state %q (run without --wait keeps STATE)", v.Done, v.Command, v.State)
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, f := range cachetest.Samples() {
		p := filepath.Join(dir, f.Name)
		if err := f.Write(p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	ctx := context.Background()
	r := inproc(ctx, append([]string{"verify"}, paths...)...)
	wantCode(t, r, 0, "verify sound samples")
	for i, f := range cachetest.Samples() {
		wantIn(t, r.stdout, "OK    "+paths[i]+"\n      "+f.Kind+": ", "verify "+f.Kind)
	}
	wantIn(t, r.stdout, "sion: 8434912 data bytes of 15728736 apparent (53.6%", "verify reports the SION gaps")

	// Damage the FTI-FF data: the chunk's MD5 no longer matches.
	bad := filepath.Join(dir, "bad.fti")
	b, err := os.ReadFile(paths[1])
	if err != nil {
		t.Fatal(err)
	}
	b[1000] ^= 0xff
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.sion")
	r = inproc(ctx, "verify", paths[0], bad, missing)
	wantCode(t, r, 1, "verify with a corrupt and a missing file")
	wantIn(t, r.stdout, "FAIL  "+bad+"\n      fti-ff, 2097444 bytes: E_CHUNK_HASH at offset 0: variable id 1", "corrupt FTI-FF")
	wantIn(t, r.stdout, "FAIL  "+missing+"\n", "missing file")
	wantIn(t, r.stdout, "no such file or directory", "missing file")
	wantIn(t, r.stderr, "2 of 3 files failed verification", "summary")

	r = inproc(ctx, "verify", "--json", paths[0], bad)
	wantCode(t, r, 1, "verify --json")
	var res []verifyResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || !res[0].OK || res[0].DataBytes != 8434912 || res[1].OK || res[1].Code != "E_CHUNK_HASH" || res[1].Offset == nil {
		t.Errorf("verify --json: %+v", res)
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	fs := newFlags("wait")
	timeout := fs.Duration("timeout", 0, "")
	q := fs.Bool("quiet", false, "")
	e := &env{ctx: context.Background()}
	pos, err := parseFlags(e, fs, []string{"a", "--timeout", "3s", "b", "--quiet", "--", "--c"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, " ") != "a b --c" || *timeout != 3*time.Second || !*q {
		t.Errorf("positional %q timeout %v quiet %v", pos, *timeout, *q)
	}
}

// TestPrintMatchesKVTree prints files KVTree wrote and compares them with
// KVTree's own printed form.
func TestPrintMatchesKVTree(t *testing.T) {
	for _, name := range []string{"transfer_library.scrinfo", "transfer_done_by_scr_transfer.scrinfo", "flush.scr"} {
		path := shareddata.File(t, "kvtree", name)
		want, err := os.ReadFile(path + ".txt")
		if err != nil {
			t.Fatal(err)
		}
		r := inproc(context.Background(), "print", path, "--indent", "2")
		wantCode(t, r, 0, "print "+name)
		if r.stdout != string(want) {
			t.Errorf("print %s:\n%s\nwant:\n%s", name, r.stdout, want)
		}
		r = inproc(context.Background(), "print", "--json", path)
		wantCode(t, r, 0, "print --json "+name)
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || len(v) == 0 {
			t.Errorf("print --json %s: %v\n%s", name, err, r.stdout)
		}
	}
}

// TestWaitWithNothingAsked: a job that never started an asynchronous flush
// has nothing to wait for; a RUN with bytes left keeps wait waiting.
func TestWaitWithNothingAsked(t *testing.T) {
	tf := filepath.Join(t.TempDir(), "transfer.scrinfo")
	tree := hashfile.New()
	tree.SetValue("STATE", "STOPPED")
	if err := os.WriteFile(tf, hashfile.Encode(tree), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := inproc(context.Background(), "wait", tf); r.code != exitOK {
		t.Fatalf("nothing asked: %v", r)
	}
	sub := tree.Set("FILES").Set("/c/a")
	sub.SetValue("DESTINATION", "/p/a")
	sub.SetUint("SIZE", 10)
	sub.SetUint("WRITTEN", 0)
	tree.SetValue("COMMAND", "RUN")
	if err := os.WriteFile(tf, hashfile.Encode(tree), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := inproc(context.Background(), "wait", "--timeout=200ms", tf); r.code != exitFailure || !strings.Contains(r.stderr, "timed out") {
		t.Fatalf("RUN with bytes left: %v", r)
	}
}
