package test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// tearWriter builds test/tearwriter once per test binary.
var tearWriter = sync.OnceValues(func() (string, error) {
	out := filepath.Join(binDir, "tearwriter")
	cmd := exec.Command("go", "build", "-o", out, "./tearwriter")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building tearwriter: %w\n%s", err, b)
	}
	return out, nil
})

// shmDir returns a fresh directory on /dev/shm, SCR's control base, or a
// temporary directory where there is none.
func shmDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "scr-tear-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestKillCannotTearTheTransferFile: a process rewriting a transfer file of
// a few hundred KB in place (through hashfile.Store, as the daemon records
// progress) is SIGKILLed at random instants, again and again. After each
// kill the next process to update the file (the next daemon, scr-ctl)
// must find it whole: it decodes, holds the library's FILES (every source,
// DESTINATION and SIZE) and COMMAND, and no WRITTEN above its SIZE. A kill
// in the middle of the write leaves the file torn for an instant;
// scr-ctl print must read it even then, and the next update completes it
// from the journal. Bounded by TEAR_KILLS kills (default 2000) and
// TEAR_BUDGET of time (default 60s).
func TestKillCannotTearTheTransferFile(t *testing.T) {
	writer, err := tearWriter()
	if err != nil {
		t.Fatal(err)
	}
	kills := envInt(t, "TEAR_KILLS", 2000)
	budget := envDuration(t, "TEAR_BUDGET", 60*time.Second)
	path := filepath.Join(shmDir(t), "transfer.scrinfo")
	lib := hashfile.NewStore(path, hashfile.Flock)
	const entries = 3000
	if _, _, err := lib.Update(func(tr *hashfile.Tree) error {
		for i := range entries {
			transfer.AddFile(tr, fmt.Sprintf("/dev/shm/cache/scr.1/ckpt.7/rank_%d.ckpt", i),
				fmt.Sprintf("/p/lustre/job/ckpt.7/rank_%d.ckpt", i), int64(1+i*7919%(64<<20)))
		}
		transfer.SetCommand(tr, transfer.Run)
		transfer.SetBW(tr, 52428800)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want, err := lib.Read()
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Size() < 200<<10 {
		t.Fatalf("transfer file of %d bytes, want a few hundred KB", fi.Size())
	}
	deadline := time.Now().Add(budget)
	tornSeen, done := 0, 0
	for ; done < kills && time.Now().Before(deadline); done++ {
		killWriterAtRandom(t, writer, path)
		if _, err := hashfile.Decode(readRaw(t, path)); err != nil {
			tornSeen++
			if tornSeen <= 5 { // scr-ctl reads a torn file as the journal completes it
				if out, err := exec.Command(filepath.Join(binDir, "scr-ctl"), "print", path).CombinedOutput(); err != nil {
					t.Fatalf("kill %d left the file torn and scr-ctl print fails on it: %v\n%s", done, err, out)
				}
			}
		}
		// The next daemon's first update.
		if _, _, err := hashfile.NewStore(path, hashfile.Flock).Update(func(*hashfile.Tree) error { return nil }); err != nil {
			t.Fatalf("after kill %d (%d torn so far) the next update fails: %v", done, tornSeen, err)
		}
		got, err := hashfile.Decode(readRaw(t, path))
		if err != nil {
			t.Fatalf("after kill %d and the next update the file does not decode: %v", done, err)
		}
		if err := sameLibraryView(want, got); err != nil {
			t.Fatalf("after kill %d: %v", done, err)
		}
	}
	t.Logf("%d kills, %d left the file torn until the next update completed it", done, tornSeen)
	if done < 200 {
		t.Fatalf("only %d kills within %v: too few to tell", done, budget)
	}
}

// killWriterAtRandom starts the tear writer on path, waits for its first
// rewrite, lets it rewrite for a random instant of up to a few rewrites,
// and SIGKILLs it.
func killWriterAtRandom(t *testing.T, writer, path string) {
	t.Helper()
	cmd := exec.Command(writer, path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("tear writer did not start: %q %v: %s", line, err, stderr.String())
	}
	// The kill's instant, drawn at random: this is what the test varies.
	time.Sleep(time.Duration(rand.Int64N(int64(8 * time.Millisecond))))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// sameLibraryView returns an error unless got holds what the library wrote
// in want: COMMAND, BW, and every FILES entry with its DESTINATION and
// SIZE, with a WRITTEN no greater than SIZE.
func sameLibraryView(want, got *hashfile.Tree) error {
	w, g := transfer.Read(want), transfer.Read(got)
	if g.Command != w.Command || g.BW != w.BW {
		return fmt.Errorf("COMMAND %q BW %v, want %q %v", g.Command, g.BW, w.Command, w.BW)
	}
	if len(g.Files) != len(w.Files) {
		return fmt.Errorf("%d FILES entries, want %d", len(g.Files), len(w.Files))
	}
	have := make(map[string]transfer.File, len(g.Files))
	for _, f := range g.Files {
		have[f.Src] = f
	}
	for _, f := range w.Files {
		h, ok := have[f.Src]
		switch {
		case !ok:
			return fmt.Errorf("FILES entry %s lost", f.Src)
		case h.Dest != f.Dest || h.Size != f.Size:
			return fmt.Errorf("FILES entry %s names %s, %d bytes, want %s, %d", f.Src, h.Dest, h.Size, f.Dest, f.Size)
		case h.Written > h.Size || h.Problem != nil:
			return fmt.Errorf("FILES entry %s: WRITTEN %d of %d (%v)", f.Src, h.Written, h.Size, h.Problem)
		}
	}
	return nil
}
