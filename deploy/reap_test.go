package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// verdict runs the reaper's decision, the function verdict of
// slurm/reap-caches.sh, on its inputs.
func verdict(t *testing.T, env []string, args ...string) string {
	t.Helper()
	script := `source <(sed -n '/^verdict() {/,/^}/p' slurm/reap-caches.sh); verdict "$@"`
	cmd := exec.Command(tool(t, "bash", "bash"), append([]string{"-c", script, "verdict"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("verdict %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestReapVerdict: a cache is never removed while a daemon serves it or
// its job has not ended; an unfinished flush is kept after the job until
// SCR_REAP_UNFLUSHED_DAYS; without an answer from Slurm only old complete
// caches go.
func TestReapVerdict(t *testing.T) {
	const day = 1440 // minutes
	for _, tc := range []struct {
		state, served, flush string
		age                  int
		want                 string // "remove" or "keep"
	}{
		{"running", "no", "complete", 30 * day, "keep"},
		{"running", "no", "unfinished", 30 * day, "keep"},
		{"ended", "yes", "complete", 30 * day, "keep"},
		{"unknown", "yes", "none", 30 * day, "keep"},
		{"ended", "no", "complete", 0, "remove"},
		{"ended", "no", "none", 0, "remove"},
		{"ended", "no", "unfinished", 0, "keep"},
		{"ended", "no", "unfinished", 7*day - 1, "keep"},
		{"ended", "no", "unfinished", 7 * day, "remove"},
		{"unknown", "no", "unfinished", 30 * day, "keep"},
		{"unknown", "no", "complete", 7*day - 1, "keep"},
		{"unknown", "no", "complete", 7 * day, "remove"},
		{"unknown", "no", "none", 7 * day, "remove"},
	} {
		got := verdict(t, nil, tc.state, tc.served, tc.flush, strconv.Itoa(tc.age))
		if verb, _, _ := strings.Cut(got, " "); verb != tc.want {
			t.Errorf("job %s, served %s, flush %s, %d min: %q, want %s", tc.state, tc.served, tc.flush, tc.age, got, tc.want)
		}
	}
	// The site's limits.
	if got := verdict(t, []string{"SCR_REAP_UNFLUSHED_DAYS=1"}, "ended", "no", "unfinished", strconv.Itoa(day)); !strings.HasPrefix(got, "remove") {
		t.Errorf("SCR_REAP_UNFLUSHED_DAYS=1, a day old: %q, want remove", got)
	}
	if got := verdict(t, []string{"SCR_REAP_UNKNOWN_DAYS=30"}, "unknown", "no", "complete", strconv.Itoa(7*day)); !strings.HasPrefix(got, "keep") {
		t.Errorf("SCR_REAP_UNKNOWN_DAYS=30, a week old: %q, want keep", got)
	}
}

// reapJob is a job's directory in a test's /dev/shm.
type reapJob struct {
	id      string
	flush   string // complete, unfinished or none
	served  bool   // a daemon holds its instance lock
	oldDays int    // last changed that many days ago
	link    bool   // the directory is a symbolic link to elsewhere
}

// TestReapCaches runs slurm/reap-caches.sh as root over a /dev/shm with
// jobs of every kind, Slurm played by testdata/fake-scontrol: it removes
// exactly the ended jobs' directories with nothing left to flush (and an
// unfinished one past its limit), keeps the rest, follows no symbolic
// link, and logs one line for each.
func TestReapCaches(t *testing.T) {
	s := newSiteScript(t)
	buildTools(t, s.bin)
	elsewhere := t.TempDir()
	jobs := []reapJob{
		{id: "101", flush: "complete"},                 // ended, forgotten by Slurm
		{id: "102", flush: "complete"},                 // ended: COMPLETED
		{id: "103", flush: "unfinished"},               // ended: CANCELLED, kept
		{id: "104", flush: "complete"},                 // RUNNING
		{id: "105", flush: "unfinished", served: true}, // a daemon serves it
		{id: "106", flush: "unfinished", oldDays: 8},   // ended 8 days ago
		{id: "107", flush: "none"},                     // COMPLETING: not over yet
		{id: "108", flush: "complete", link: true},     // a link: never followed
	}
	remove := map[string]bool{"101": true, "102": true, "106": true}
	base := filepath.Join(s.shm, s.user)
	mustMkdir(t, base)
	for _, j := range jobs {
		dir := filepath.Join(base, "scr."+j.id)
		if j.link {
			target := filepath.Join(elsewhere, "scr."+j.id)
			mustMkdir(t, target)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mustMkdir(t, dir)
		transfer := filepath.Join(dir, "transfer.scrinfo")
		src := filepath.Join(dir, "ckpt")
		if err := os.WriteFile(src, []byte("checkpoint "+j.id), 0o600); err != nil {
			t.Fatal(err)
		}
		var args []string
		switch j.flush {
		case "complete":
			args = []string{"stop", "--create", transfer}
		case "unfinished":
			args = []string{"add", transfer, src, filepath.Join(s.dir, "pfs", j.id)}
		}
		if args != nil {
			if out, err := exec.Command(filepath.Join(s.bin, "scr-ctl"), args...).CombinedOutput(); err != nil {
				t.Fatalf("scr-ctl %v: %v\n%s", args, err, out)
			}
		}
		if j.served {
			f, err := os.OpenFile(filepath.Join(dir, ".transfer.scrinfo.lock"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
		}
		if j.oldDays > 0 {
			old := time.Now().Add(-time.Duration(j.oldDays) * 24 * time.Hour)
			for _, p := range []string{transfer, src, dir} {
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	code, syslog := s.run(t, "slurm/reap-caches.sh",
		"FAKE_SCONTROL_JOBS=102=COMPLETED 103=CANCELLED 104=RUNNING 107=COMPLETING")
	if code != 0 {
		t.Fatalf("exit status %d", code)
	}
	for _, j := range jobs {
		dir := filepath.Join(base, "scr."+j.id)
		_, err := os.Lstat(dir)
		if gone := err != nil; gone != remove[j.id] {
			t.Errorf("job %s (%+v): removed %v, want %v", j.id, j, gone, remove[j.id])
		}
		verb := map[bool]string{true: "removed", false: "keeping"}[remove[j.id]]
		if j.link {
			verb = "not touching"
		}
		if !strings.Contains(syslog, "job "+j.id+": "+verb+" ") {
			t.Errorf("job %s: no log line saying %q", j.id, verb)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "scr.108")); err != nil {
		t.Errorf("the target of a planted link was removed: %v", err)
	}

	// No controller answers: a fresh complete cache of an unknown job is
	// kept; --ended names the epilog's own job, which is over.
	s2 := newSiteScript(t)
	buildTools(t, s2.bin)
	for _, id := range []string{"201", "202"} {
		dir := filepath.Join(s2.shm, s2.user, "scr."+id)
		mustMkdir(t, dir)
		if out, err := exec.Command(filepath.Join(s2.bin, "scr-ctl"), "stop", "--create", filepath.Join(dir, "transfer.scrinfo")).CombinedOutput(); err != nil {
			t.Fatalf("scr-ctl: %v\n%s", err, out)
		}
	}
	if code, _ := s2.runArgs(t, "slurm/reap-caches.sh", []string{"--ended", "202"}, "FAKE_SCONTROL_DOWN=1"); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	if _, err := os.Stat(filepath.Join(s2.shm, s2.user, "scr.201")); err != nil {
		t.Errorf("a job Slurm could not be asked about was reaped: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s2.shm, s2.user, "scr.202")); err == nil {
		t.Error("the --ended job's complete cache is left")
	}
}
