package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestAddManyFiles: 10,000 files from a manifest on standard input in one
// call of the real binary; every entry lands with its DESTINATION, SIZE
// and WRITTEN 0 (the sizes of the real sources, or the SIZE given).
func TestAddManyFiles(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	const n, real = 10000, 100
	var manifest strings.Builder
	manifest.WriteString("# a job's checkpoints\n\n")
	want := map[string]transfer.File{}
	for i := range n {
		f := transfer.File{Src: filepath.Join(dir, "cache", fmt.Sprintf("rank_%05d.ckpt", i)),
			Dest: filepath.Join(dir, "pfs", "with space", fmt.Sprintf("rank_%05d.ckpt", i)), Size: int64(1000 + i)}
		switch {
		case i < real: // a real source, its size read; a tab lets DEST hold a space
			writeFile(t, f.Src, int(f.Size), uint32(i))
			fmt.Fprintf(&manifest, "%s\t%s\n", f.Src, f.Dest)
		default:
			fmt.Fprintf(&manifest, "%s\t%s\t%d\n", f.Src, f.Dest, f.Size)
		}
		want[f.Src] = f
	}
	cmd := exec.Command(ctlBin, "add", "--stdin", tf)
	cmd.Stdin = strings.NewReader(manifest.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("add --stdin: %v\n%s", err, out)
	}
	v := readView(t, tf)
	if len(v.Files) != n {
		t.Fatalf("%d FILES entries, want %d", len(v.Files), n)
	}
	for _, f := range v.Files {
		w, ok := want[f.Src]
		if !ok || f.Dest != w.Dest || f.Size != w.Size || f.Written != 0 || f.Problem != nil {
			t.Fatalf("entry %+v, want %+v", f, w)
		}
	}
}

// TestAddIsAllOrNothing: several pairs as arguments land together; a
// manifest with one bad line, even its last, adds nothing and names the
// line.
func TestAddIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "transfer.scrinfo")
	ctx := context.Background()
	wantCode(t, inproc(ctx, "add", "--size=1K", tf, "/c/a", "/p/a", "/c/b", "/p/b"), exitOK, "add two pairs")
	if v := readView(t, tf); len(v.Files) != 2 || v.Files[1].Src != "/c/b" || v.Files[1].Size != 1024 {
		t.Fatalf("two pairs: %+v", v.Files)
	}
	for _, tc := range []struct {
		manifest, msg string
	}{
		{"/c/x /p/x 10\n/c/y /p/y 10\n/c/z\n", "standard input: line 3: want SRC DEST [SIZE], got 1 fields"},
		{"/c/x /p/x 10\n/c/y /p/y 1.5\n", "line 2: SIZE \"1.5\" is 1.5 bytes: want a whole number of bytes"},
		{"/c/x /p/x 10\n/c/x /p/other 10\n", "standard input line 2: SRC /c/x is listed twice (first at standard input line 1)"},
		{"/c/x /p/x 10\n" + filepath.Join(dir, "missing") + " /p/m\n", "standard input line 2: source stat " + filepath.Join(dir, "missing")},
		{"# nothing\n\n", "the manifest is empty"},
	} {
		r := inprocStdin(ctx, tc.manifest, "add", "--stdin", tf)
		wantCode(t, r, exitFailure, "add --stdin "+tc.manifest)
		wantIn(t, r.stderr, tc.msg, "add --stdin "+tc.manifest)
		if v := readView(t, tf); len(v.Files) != 2 {
			t.Fatalf("a rejected manifest added files: %+v", v.Files)
		}
	}
	r := inproc(ctx, "add", tf, "/c/a", "/p/a", "/c/b")
	wantCode(t, r, exitUsage, "add with an odd number of paths")
	wantIn(t, r.stderr, "want TRANSFERFILE SRC DEST [SRC DEST]...", "add with an odd number of paths")
	r = inproc(ctx, "add", "--stdin", tf, "/c/a", "/p/a")
	wantCode(t, r, exitUsage, "add --stdin with paths")
}

// inprocStdin runs scr-ctl in this process with stdin as its input.
func inprocStdin(ctx context.Context, stdin string, args ...string) result {
	var out, errb strings.Builder
	e := &env{ctx: ctx, stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, now: time.Now,
		term: func() (bool, int, int) { return false, 0, 0 }}
	code := runEnv(e, args)
	return result{out.String(), errb.String(), code}
}

func TestManifestLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
		want addition
		err  string
	}{
		{"/c/a /p/a", true, addition{src: "/c/a", dest: "/p/a", size: -1}, ""},
		{"  /c/a   /p/a  4K ", true, addition{src: "/c/a", dest: "/p/a", size: 4096}, ""},
		{"/c/my file\t/p/my file\t100\r", true, addition{src: "/c/my file", dest: "/p/my file", size: 100}, ""},
		{"", false, addition{}, ""},
		{"   # comment", false, addition{}, ""},
		{"/c/a", false, addition{}, "got 1 fields"},
		{"/c/a /p/a 1 2", false, addition{}, "got 4 fields"},
		{"/c/a /p/a -5", false, addition{}, "SIZE"},
	} {
		a, ok, err := manifestLine(tc.line, -1)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.line, err, tc.err)
		case tc.err == "" && (err != nil || ok != tc.ok || a != tc.want):
			t.Errorf("%q: %+v %v %v, want %+v %v", tc.line, a, ok, err, tc.want, tc.ok)
		}
	}
}

// FuzzManifestLine: any line parses or is refused with an error, never a
// panic; what parses has a SRC and a DEST without tabs or line ends and a
// size that is not negative unless left to the source.
func FuzzManifestLine(f *testing.F) {
	for _, s := range []string{"/c/a /p/a", "/c/a\t/p/a\t4K", "#x", "", "a b c d", "a\tb\t\t1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		a, ok, err := manifestLine(line, -1)
		if err != nil || !ok {
			return
		}
		if a.src == "" || a.dest == "" || strings.ContainsAny(a.src+a.dest, "\t\n") || a.size < -1 {
			t.Fatalf("%q parsed as %+v", line, a)
		}
	})
}
