package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

const versionPkg = "github.com/scr-transferd/scr-transferd/internal/version"

// clone makes a fresh clone of this repository at its HEAD commit, as a
// site would, and returns its directory and the commit.
func clone(t *testing.T) (dir, rev string) {
	t.Helper()
	git := tool(t, "git", "git")
	out, err := exec.Command(git, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	rev = strings.TrimSpace(string(out))
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "scr-transferd")
	for _, args := range [][]string{
		{"clone", "--quiet", "--no-checkout", strings.TrimSpace(string(top)), dir},
		{"-C", dir, "checkout", "--quiet", rev},
	} {
		if out, err := exec.Command(git, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir, rev
}

// goCmd runs go in dir with the default -buildvcs=auto (a developer's
// GOFLAGS may turn stamping off) and GOBIN=bin.
func goCmd(t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=auto", "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}

func versionOf(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestInstallFromCloneStampsTheVersion runs the README's install line in a
// fresh clone (the module is not published) and checks that both binaries
// report the commit they were built from.
func TestInstallFromCloneStampsTheVersion(t *testing.T) {
	testenv.Long(t, "clones the repository and builds both commands in it")
	dir, rev := clone(t)
	bin := filepath.Join(t.TempDir(), "bin")
	goCmd(t, dir, bin, "install", "./cmd/...")
	for _, name := range []string{"scr-transferd", "scr-ctl"} {
		v := versionOf(t, filepath.Join(bin, name))
		t.Logf("%s", v)
		if !strings.HasPrefix(v, name+" ") || !strings.Contains(v, "revision "+rev) {
			t.Errorf("%s --version = %q, want the name and revision %s", name, v, rev)
		}
		if strings.Contains(v, "modified") {
			t.Errorf("%s --version = %q: a clean clone is not modified", name, v)
		}
	}
}

// TestVersionLinkTimeOverride: packagers set the version and revision with
// -ldflags -X.
func TestVersionLinkTimeOverride(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	goCmd(t, "..", bin, "install", "-ldflags",
		"-X "+versionPkg+".version=9.9.9-site -X "+versionPkg+".revision=feedface", "./cmd/...")
	for _, name := range []string{"scr-transferd", "scr-ctl"} {
		v := versionOf(t, filepath.Join(bin, name))
		if !strings.HasPrefix(v, name+" 9.9.9-site (revision feedface") {
			t.Errorf("%s --version = %q, want the packager's 9.9.9-site and feedface", name, v)
		}
	}
}

// TestDaemonLogsItsVersionAtStart reads the daemon's first log lines.
func TestDaemonLogsItsVersionAtStart(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	goCmd(t, "..", bin, "install", "-ldflags", "-X "+versionPkg+".version=7.7.7-logged", "./cmd/scr-transferd")
	ctl := filepath.Join(t.TempDir(), "cntl")
	if err := os.Mkdir(ctl, 0o700); err != nil {
		t.Fatal(err)
	}
	d := testenv.Start(t, exec.Command(filepath.Join(bin, "scr-transferd"), "--log-format=json", filepath.Join(ctl, "transfer.scrinfo")))
	defer func() {
		_ = d.Cmd.Process.Signal(syscall.SIGTERM)
		<-d.Done()
	}()
	d.WaitLogAfter(0, 2*time.Minute, `"version":"7.7.7-logged"`)
}
