package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// modulePath is the project's module; the commands are built by import
// path so that a test package at any depth builds the same thing.
const modulePath = "github.com/scr-transferd/scr-transferd"

// Daemon and Ctl are the names of the project's commands (cmd/NAME).
const (
	Daemon = "scr-transferd"
	Ctl    = "scr-ctl"
)

// Build says how the commands are built for a test package.
type Build struct {
	// Commands names the commands to build: a name under cmd/, or a
	// package path within the module holding a slash (such as
	// internal/fusetest/cmd/fusemount); empty means scr-transferd and
	// scr-ctl.
	Commands []string
	// Race builds them with the race detector (Build{Race: Race} runs
	// them the way the tests themselves run).
	Race bool
	// Static builds them with CGO_ENABLED=0, as a site installs them
	// (a sandboxed unit's system-call filter refuses the race runtime).
	Static bool
	// Beside names files to copy into the directory beside the commands,
	// executable by every user: name in the directory → source path
	// (relative to the test package's directory), such as a script the
	// commands' users find on PATH.
	Beside map[string]string
}

// args returns the go command's arguments to build b into dir.
func (b Build) args(dir string) []string {
	args := []string{"build", "-o", dir}
	if b.Race {
		args = append(args, "-race")
	}
	cmds := b.Commands
	if len(cmds) == 0 {
		cmds = []string{Daemon, Ctl}
	}
	for _, c := range cmds {
		if !strings.Contains(c, "/") {
			c = "cmd/" + c
		}
		args = append(args, modulePath+"/"+c)
	}
	return args
}

// Binaries is one build of the project's commands for one test process:
// built on first use, at most once, into a temporary directory that
// every user may read and search (the tests run daemons as other users
// too), and removed by Main when the tests are over. A test package
// holds it in a package variable, documented as its once-per-process
// build, since a TestMain has no other way to hand it to its tests.
type Binaries struct {
	build   Build
	once    sync.Once
	mu      sync.Mutex // guards what follows, which Remove changes
	dir     string
	err     error
	removed bool
}

// NewBinaries returns the build b, not yet built.
func NewBinaries(b Build) *Binaries { return &Binaries{build: b} }

// Dir returns the directory holding the commands, building them on the
// first call; every later call returns the same directory or error.
func (b *Binaries) Dir() (string, error) {
	b.once.Do(func() {
		dir, err := buildInto(context.Background(), b.build)
		b.mu.Lock()
		b.dir, b.err = dir, err
		b.mu.Unlock()
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.removed {
		return "", errors.New("the commands built for the tests were removed: the tests are over")
	}
	return b.dir, b.err
}

// Need returns Dir, failing tb if the commands could not be built.
func (b *Binaries) Need(tb testing.TB) string {
	tb.Helper()
	dir, err := b.Dir()
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// Path returns the path of the command name, building the commands first
// if need be.
func (b *Binaries) Path(tb testing.TB, name string) string {
	tb.Helper()
	return filepath.Join(b.Need(tb), name)
}

// Remove deletes the built commands, if they were built.
func (b *Binaries) Remove() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir == "" || b.removed {
		return nil
	}
	b.removed = true
	return os.RemoveAll(b.dir)
}

// buildInto builds b into a new temporary directory.
func buildInto(ctx context.Context, b Build) (string, error) {
	dir, err := os.MkdirTemp("", "scr-transferd-test-bin-")
	if err != nil {
		return "", fmt.Errorf("building the commands for the tests: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", errors.Join(fmt.Errorf("building the commands for the tests: %w", err), os.RemoveAll(dir))
	}
	cmd := exec.CommandContext(ctx, "go", b.args(dir)...)
	cmd.Env = os.Environ()
	if b.Static {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.Join(fmt.Errorf("go %v: %w\n%s", b.args(dir), err, out), os.RemoveAll(dir))
	}
	for name, src := range b.Beside {
		if err := copyExecutable(src, filepath.Join(dir, name)); err != nil {
			return "", errors.Join(fmt.Errorf("building the commands for the tests: %w", err), os.RemoveAll(dir))
		}
	}
	return dir, nil
}

// copyExecutable copies the file src to dst, mode 0755.
func copyExecutable(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		return err
	}
	return os.Chmod(dst, 0o755) // whatever the umask
}

// Main runs m's tests and then removes every build in bins; its result is
// TestMain's exit code:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins)) }
func Main(m *testing.M, bins ...*Binaries) int {
	code := m.Run()
	for _, b := range bins {
		if err := b.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "removing the commands built for the tests:", err)
		}
	}
	return code
}
