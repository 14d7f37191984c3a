package field

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// bins is this package's once-per-process build of scr-transferd and
// scr-ctl, with the race detector when the tests run with it, and the
// cache reaper beside them, where the job scripts look for it (PATH);
// plainBins is the static build without it that a site installs (a
// sandboxed unit's LockPersonality= and system-call filter refuse the race
// runtime). Each is built the first time a test asks for it.
var (
	bins = testenv.NewBinaries(testenv.Build{Race: testenv.Race,
		Beside: map[string]string{"scr-transferd-reap": "../../deploy/slurm/reap-caches.sh"}})
	plainBins = testenv.NewBinaries(testenv.Build{Static: true})
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins, plainBins)) }

// run runs a command and returns its standard output, failing the test
// with the command's output if it fails.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := output(env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// output runs a command with a generous time limit and returns its
// standard output, or an error carrying everything it printed.
func output(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	timer := time.AfterFunc(5*time.Minute, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// sha256File returns the hex SHA-256 of the file at path.
func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// manifestEntry is one checkpoint file the stand-in application handed to
// the daemon: the SHA-256 of its source when written, and its destination.
type manifestEntry struct {
	sum, dest string
}

// readManifests reads every manifest.* file in dir ("SUM DEST" lines).
func readManifests(t *testing.T, dir string) []manifestEntry {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "manifest.*"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []manifestEntry
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			sum, dest, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				t.Fatalf("%s: malformed line %q", p, sc.Text())
			}
			entries = append(entries, manifestEntry{sum, dest})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return entries
}

// sameBytes fails unless every manifest entry's destination holds exactly
// the bytes its source held.
func sameBytes(t *testing.T, entries []manifestEntry) {
	t.Helper()
	for _, e := range entries {
		got, err := sha256File(e.dest)
		if err != nil {
			t.Errorf("checkpoint not flushed: %v", err)
			continue
		}
		if got != e.sum {
			t.Errorf("%s differs from its source (sha256 %s, want %s)", e.dest, got, e.sum)
		}
	}
}
