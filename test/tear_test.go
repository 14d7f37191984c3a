package test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// tearWriter returns test/tearwriter, built once per test binary.
func tearWriter() (string, error) {
	dir, err := helperBins.Dir()
	return filepath.Join(dir, "tearwriter"), err
}

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
// from the journal. The writing and the checking run in test/tearwriter,
// outside the race detector. Bounded by TEAR_KILLS kills (default 2000)
// and TEAR_BUDGET of time (default 90s).
func TestKillCannotTearTheTransferFile(t *testing.T) {
	testenv.Long(t, "kills a process rewriting a transfer file again and again")
	helper, err := tearWriter()
	if err != nil {
		t.Fatal(err)
	}
	kills := envInt(t, "TEAR_KILLS", 2000)
	budget := envDuration(t, "TEAR_BUDGET", 90*time.Second)
	dir := shmDir(t)
	path, want := filepath.Join(dir, "transfer.scrinfo"), filepath.Join(dir, "library.scrinfo")
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
	img := readRaw(t, path)
	if len(img) < 200<<10 {
		t.Fatalf("transfer file of %d bytes, want a few hundred KB", len(img))
	}
	must(t, os.WriteFile(want, img, 0o600))
	deadline := time.Now().Add(budget)
	tornSeen, done := 0, 0
	for ; done < kills && time.Now().Before(deadline); done++ {
		killWriterAtRandom(t, helper, path)
		if checkTear(t, helper, path, want, done, tornSeen < 5) {
			tornSeen++
		}
	}
	t.Logf("%d kills, %d left the file torn until the next update completed it", done, tornSeen)
	if done < 100 {
		t.Fatalf("only %d kills within %v: too few to tell", done, budget)
	}
}

// checkTear looks at path after kill number kill: if it is torn and print
// is set, scr-ctl print must read it as it stands; then the helper's check
// (the next daemon's update, the library's view compared) must pass. It
// reports whether the file was torn.
func checkTear(t *testing.T, helper, path, want string, kill int, print bool) (torn bool) {
	t.Helper()
	if print && tornImage(readRaw(t, path)) {
		if out, err := exec.Command(bins.Path(t, testenv.Ctl), "print", path).CombinedOutput(); err != nil {
			t.Fatalf("kill %d left the file torn and scr-ctl print fails on it: %v\n%s", kill, err, out)
		}
	}
	out, err := exec.Command(helper, "check", path, want).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("after kill %d: %v\n%s%s", kill, err, out, stderr)
	}
	return strings.TrimSpace(string(out)) == "torn"
}

// tornImage tells, without decoding (costly under the race detector),
// whether b fails the checks KVTree's reader makes: the size its header
// declares present, and the CRC over it.
func tornImage(b []byte) bool {
	if len(b) < hashfile.HeaderSize+4 {
		return true
	}
	size := binary.BigEndian.Uint64(b[8:16])
	if size < hashfile.HeaderSize+4 || size > uint64(len(b)) {
		return true
	}
	return crc32.ChecksumIEEE(b[:size-4]) != binary.BigEndian.Uint32(b[size-4:size])
}

// killWriterAtRandom starts the tear writer on path, waits for its first
// rewrite, lets it rewrite for a random instant of up to a few rewrites,
// and SIGKILLs it.
func killWriterAtRandom(t *testing.T, helper, path string) {
	t.Helper()
	cmd := exec.Command(helper, "write", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.SyncBuffer
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
