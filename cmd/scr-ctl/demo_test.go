package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/scr-transferd/scr-transferd/cache/cachetest"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// demoRun runs the demo in process with args and returns its result.
func demoRun(t *testing.T, args ...string) result {
	t.Helper()
	testenv.Long(t, "runs a flush")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return inproc(ctx, append([]string{"demo", "--bw", "64MiB"}, args...)...)
}

// listTree returns every path under dir, relative to it.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if r, _ := filepath.Rel(dir, p); r != "." {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// demoRoot returns the directory the demo said it worked in.
func demoRoot(t *testing.T, stdout string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  (/\S*scr-demo-\d+)$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("the demo did not name its directory:\n%s", stdout)
	}
	return m[1]
}

// TestDemoCleanupRemovesOnlyItsOwn: --cleanup in a directory holding other
// files removes the directory the demo made and nothing else; the closing
// text names no file that no longer exists.
func TestDemoCleanupRemovesOnlyItsOwn(t *testing.T) {
	dir := t.TempDir()
	for p, content := range map[string]string{
		"notes.txt":            "mine",
		"project/main.go":      "package main",
		"scr-demo-old/keep.me": "an earlier demo's, not this one's",
		"cache/other.ckpt":     "a name the demo also uses",
	} {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := listTree(t, dir)
	r := demoRun(t, "--dir", dir, "--cleanup")
	wantCode(t, r, 0, "demo --cleanup")
	if after := listTree(t, dir); !slices.Equal(before, after) {
		t.Errorf("--dir held %q before the demo and %q after", before, after)
	}
	root := demoRoot(t, r.stdout)
	if filepath.Dir(root) != dir {
		t.Errorf("the demo worked in %s, not in a directory of its own under %s", root, dir)
	}
	wantIn(t, r.stdout, "Removed "+root+" (--cleanup)", "the closing text")
	// After the removal nothing may point into the removed directory.
	tail := r.stdout[strings.LastIndex(r.stdout, "\nDone: "):]
	if n := strings.Count(tail, root); n != 1 {
		t.Errorf("the closing text names the removed directory %d times, want only in the removal notice:\n%s", n, tail)
	}
	if strings.Contains(tail, "Try:") {
		t.Errorf("the closing text suggests commands on removed files:\n%s", tail)
	}

	// A --dir that did not exist is created, and removed again if empty.
	fresh := filepath.Join(t.TempDir(), "a", "b")
	r = demoRun(t, "--dir", fresh, "--cleanup")
	wantCode(t, r, 0, "demo --cleanup in a new directory")
	if _, err := os.Stat(filepath.Dir(fresh)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directories the demo created for --dir are left: %v", err)
	}
}

// TestDemoKeepsFiles: without --cleanup the files stay, and the closing text
// points at them with commands that work from any directory.
func TestDemoKeepsFiles(t *testing.T) {
	dir := t.TempDir()
	r := demoRun(t, "--dir", dir)
	wantCode(t, r, 0, "demo")
	root := demoRoot(t, r.stdout)
	for _, p := range []string{"control/transfer.scrinfo", "scr-transferd.log", "pfs/scr.dataset.1/rank_0.sion"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("demo left no %s: %v", p, err)
		}
	}
	ctl := demoCtlCommand(exec.LookPath, os.Executable, os.Getwd)
	wantIn(t, r.stdout, "Try:\n  "+ctl+" status "+filepath.Join(root, "control", "transfer.scrinfo")+"\n", "the Try lines")
	if n := strings.Count(r.stdout, "OK   same bytes, CRC32 0x"); n != 4 {
		t.Errorf("%d destinations checked OK, want 4:\n%s", n, r.stdout)
	}
}

// TestDemoCtlCommand: the "Try:" lines name scr-ctl so that they work from
// any directory.
func TestDemoCtlCommand(t *testing.T) {
	mod := t.TempDir()
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module github.com/scr-transferd/scr-transferd\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(mod, "cmd", "scr-ctl")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	found := func(string) (string, error) { return "/usr/local/bin/scr-ctl", nil }
	missing := func(string) (string, error) { return "", exec.ErrNotFound }
	exe := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }
	wd := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }
	tests := []struct {
		name     string
		lookPath func(string) (string, error)
		exe      func() (string, error)
		wd       func() (string, error)
		want     string
	}{
		{"on PATH", found, exe("/opt/x/scr-ctl"), wd(other), "scr-ctl"},
		{"built binary", missing, exe("/opt/x/scr-ctl"), wd(other), "/opt/x/scr-ctl"},
		{"go run in the module", missing, exe("/tmp/go-build123/b001/exe/scr-ctl"), wd(sub), "go -C " + mod + " run ./cmd/scr-ctl"},
		{"go run elsewhere", missing, exe("/tmp/go-build123/b001/exe/scr-ctl"), wd(other), "scr-ctl"},
	}
	for _, tc := range tests {
		if got := demoCtlCommand(tc.lookPath, tc.exe, tc.wd); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestDemoScreens compares the demo's screen at 80 and 100 columns with the
// golden files (go test -update rewrites them, as it does every golden file), after replacing what
// varies between runs: the directory, the measured rates and times. Every
// line fits the width; at 100x30 the whole demo fits the screen, and at
// 80x24 the summary comes last, so that it is what stays in view.
func TestDemoScreens(t *testing.T) {
	ctl := demoCtlCommand(exec.LookPath, os.Executable, os.Getwd)
	for _, size := range []struct{ w, h int }{{80, 24}, {100, 30}} {
		name := strconv.Itoa(size.w) + "x" + strconv.Itoa(size.h)
		t.Run(name, func(t *testing.T) {
			r := demoRun(t, "--dir", t.TempDir(), "--width", strconv.Itoa(size.w))
			wantCode(t, r, 0, "demo")
			root := demoRoot(t, r.stdout)
			s := strings.ReplaceAll(r.stdout, root, "/tmp/scr-demo-0123456789")
			s = strings.ReplaceAll(s, "\n  "+ctl+" ", "\n  scr-ctl ")
			// The measured rate and time, never the limit.
			s = regexp.MustCompile(`(?m)( 15\.3 MiB) +(\d+(\.\d+)? [KMG]?i?B/s)$`).ReplaceAllString(s, "$1  R.RR MiB/s")
			s = regexp.MustCompile(`of data in \d+\.\d s: \S+ [KMG]?i?B/s under`).ReplaceAllString(s, "of data in T.T s: R.RR MiB/s under")
			lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
			for _, l := range lines {
				if n := utf8.RuneCountInString(l); n > size.w {
					t.Errorf("%d columns, more than %d: %q", n, size.w, l)
				}
			}
			if size.h >= 30 && len(lines) >= size.h {
				t.Errorf("%d lines do not fit %d rows with the prompt", len(lines), size.h)
			}
			if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Done: ") }); i < len(lines)-size.h+1 || i < 0 {
				t.Errorf("the summary is not on the last screen (line %d of %d)", i+1, len(lines))
			}
			testenv.Golden(t, filepath.Join("testdata", "demo-"+name+".txt"), []byte(s))
		})
	}
}

// TestDemoRateWithinLimit: the rate the demo shows counts bytes that hold
// data (not the SIONlib container's holes) over the flush, so it never
// exceeds the limit it set. This bounds the throttle, not the machine.
func TestDemoRateWithinLimit(t *testing.T) {
	r := demoRun(t, "--dir", t.TempDir())
	wantCode(t, r, 0, "demo")
	m := regexp.MustCompile(`: (\d+(?:\.\d+)?) MiB/s under BW 64\.0 MiB/s\.`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no summary rate:\n%s", r.stdout)
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v > 64 {
		t.Errorf("the demo shows %s MiB/s under a limit of 64 MiB/s", m[1])
	}
}

// TestVerifyNameClaims: a LIME sample whose magic number is zeroed is not
// "OK plain": its name claims LIME.
func TestVerifyNameClaims(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rank_2.lime")
	if err := cachetest.WriteLIME(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, make([]byte, 8))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := inproc(context.Background(), "verify", p)
	wantCode(t, r, 1, "verify of a LIME file with its magic zeroed")
	wantIn(t, r.stdout, "FAIL  "+p+"\n      lime, ", "the verdict")
	wantIn(t, r.stdout, "E_BAD_MAGIC", "the code")
}
