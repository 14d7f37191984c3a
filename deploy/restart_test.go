package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// exitStatus runs the daemon with args and returns its exit status.
func exitStatus(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bins.Path(t, testenv.Daemon), args...)
	// A daemon that starts after all would run until killed.
	timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	out, err := cmd.CombinedOutput()
	timer.Stop()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestUnitsDoNotRestartPermanentErrors: the daemon's exit status for each
// permanent error (another daemon already serving the transfer file, a
// control directory of another user) is one the units never restart on,
// never the status of a crash (2, also a bad configuration's), and every
// other failure is bounded by a start limit.
// The statuses are the real daemon's, provoked here.
func TestUnitsDoNotRestartPermanentErrors(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Absent(t, "needs root (a control directory of another user)")
	}
	dir := t.TempDir()
	transfer := filepath.Join(dir, "cntl", "transfer.scrinfo")
	statuses := map[string]int{}

	// A bad configuration exits 2, as a Go crash does (a panic, the dump
	// after the watchdog's SIGABRT): it must restart, bounded by the start
	// limit.
	if code, _ := exitStatus(t, "--nice=99", transfer); code != 2 {
		t.Errorf("bad configuration: exit status %d, want 2", code)
	}

	mustMkdir(t, filepath.Dir(transfer))
	first := testenv.Start(t, exec.Command(bins.Path(t, testenv.Daemon), "--log-format=json", transfer))
	lock := filepath.Join(dir, "cntl", ".transfer.scrinfo.lock")
	testenv.WaitFor(t, "the first daemon to take its instance lock", time.Minute, func() bool {
		b, err := os.ReadFile(lock)
		return err == nil && strings.TrimSpace(string(b)) != ""
	})
	var out string
	statuses["already served"], out = exitStatus(t, "--log-format=json", transfer)
	if !strings.Contains(out, "already served") {
		t.Errorf("the second daemon does not say the file is already served:\n%s", out)
	}
	first.Signal(syscall.SIGTERM)
	first.Wait(time.Minute)
	if err := first.Err(); err != nil {
		t.Errorf("the first daemon after SIGTERM: %v", err)
	}

	// A daemon running as another user than the control directory's.
	other := filepath.Join(dir, "other", "transfer.scrinfo")
	mustMkdir(t, filepath.Dir(other))
	if err := os.Chown(filepath.Dir(other), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	statuses["wrong user"], out = exitStatus(t, "--log-format=json", other)
	if !strings.Contains(out, "owned by uid 4242") {
		t.Errorf("the daemon does not say whose the control directory is:\n%s", out)
	}

	for _, u := range units {
		unit := unitSection(t, u.path, "[Unit]")
		svc := unitSection(t, u.path, "[Service]")
		prevent := svc["RestartPreventExitStatus"]
		for what, code := range statuses {
			if code == 0 || code == 1 {
				t.Errorf("%s: the daemon exits %d, which does not tell a permanent error apart", what, code)
			}
			if !slices.Contains(prevent, strconv.Itoa(code)) {
				t.Errorf("%s: RestartPreventExitStatus=%v lacks %d (%s): systemd restarts it over and over", u.path, prevent, code, what)
			}
		}
		if slices.Contains(prevent, "2") {
			t.Errorf("%s: RestartPreventExitStatus=%v has 2, Go's exit status after a crash or the watchdog's SIGABRT: no restart after those", u.path, prevent)
		}
		if len(unit["StartLimitBurst"]) == 0 || len(unit["StartLimitIntervalSec"]) == 0 {
			t.Errorf("%s: no StartLimitBurst= and StartLimitIntervalSec= in [Unit]: other failures restart for ever", u.path)
		}
		if _, ok := unitSection(t, u.path, "[Install]")[""]; ok {
			t.Errorf("%s: an [Install] section: an enabled instance starts a stale job's daemon at boot", u.path)
		}
	}
	t.Logf("exit statuses: %v", statuses)
}

// TestDropInOrder: systemd applies drop-ins in the order of their file
// names, whatever their directory; the prolog's per-job drop-in must come
// after the site's, so that the job's User= wins, and the site example
// must not set the user at all.
func TestDropInOrder(t *testing.T) {
	readme, err := os.ReadFile("systemd/README.md")
	if err != nil {
		t.Fatal(err)
	}
	prolog, err := os.ReadFile("slurm/prolog.sh")
	if err != nil {
		t.Fatal(err)
	}
	site := findName(string(readme), "scr-transferd@.service.d/", ".conf")
	job := findName(string(prolog), `$dropin/`, ".conf")
	if site == "" || job == "" {
		t.Fatalf("drop-in names: site %q (README), job %q (prolog)", site, job)
	}
	if !(site < job) {
		t.Errorf("the site drop-in %s sorts after the job's %s: the site's settings win", site, job)
	}
	for _, key := range []string{"User", "Group"} {
		if v := unitSection(t, "systemd/site.conf.example", "[Service]")[key]; len(v) > 0 {
			t.Errorf("site.conf.example sets %s=%v: with a per-job drop-in ordered before it, every job's daemon would run as that user", key, v)
		}
	}
}

// findName returns the first file name that follows prefix and ends with
// suffix in s, "" if none.
func findName(s, prefix, suffix string) string {
	for {
		i := strings.Index(s, prefix)
		if i < 0 {
			return ""
		}
		s = s[i+len(prefix):]
		end := strings.IndexAny(s, " \n\"'`")
		if end < 0 {
			end = len(s)
		}
		if name := s[:end]; strings.HasSuffix(name, suffix) && !strings.Contains(name, "/") {
			return name
		}
	}
}
