package deploy

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// siteScript is a run of prolog.sh or epilog.sh as slurmd runs them (as
// root), with testdata/fake-systemctl and a logger that writes to a file.
type siteScript struct {
	dir, bin, shm, units, metrics string
	user                          string
}

func newSiteScript(t *testing.T) *siteScript {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Absent(t, "needs root: the prolog and epilog run as root (runuser)")
	}
	tool(t, "runuser", "util-linux")
	tool(t, "systemd-escape", "systemd")
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	s := &siteScript{dir: t.TempDir(), user: me.Username}
	s.bin, s.shm, s.units, s.metrics = filepath.Join(s.dir, "bin"), filepath.Join(s.dir, "shm"), filepath.Join(s.dir, "units"), filepath.Join(s.dir, "metrics")
	for _, d := range []string{s.bin, s.shm, s.units, s.metrics} {
		mustMkdir(t, d)
	}
	for name, src := range map[string]string{
		"systemctl":          "testdata/fake-systemctl",
		"scontrol":           "testdata/fake-scontrol",
		"scr-transferd-reap": "slurm/reap-caches.sh",
	} {
		abs, err := filepath.Abs(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(s.bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	logger := "#!/bin/sh\necho \"$*\" >> " + filepath.Join(s.dir, "syslog") + "\n"
	if err := os.WriteFile(filepath.Join(s.bin, "logger"), []byte(logger), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs script and returns its exit status and what it logged.
func (s *siteScript) run(t *testing.T, script string, env ...string) (int, string) {
	t.Helper()
	return s.runArgs(t, script, nil, env...)
}

// runArgs runs script with arguments args, as run does.
func (s *siteScript) runArgs(t *testing.T, script string, args []string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(tool(t, "bash", "bash"), append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(),
		"PATH="+s.bin+":"+os.Getenv("PATH"),
		"SLURM_JOB_USER="+s.user, "SLURM_JOB_ID=55",
		"SCR_CNTL_BASE="+s.shm, "SCR_CACHE_BASE="+s.shm,
		"SCR_TRANSFERD_UNIT_DIR="+s.units, "SCR_TRANSFERD_METRICS_DIR="+s.metrics,
		"FAKE_SYSTEMCTL_LOG="+filepath.Join(s.dir, "systemctl"),
		// A job that asks for a daemon; the tests run as root.
		"SLURM_JOB_COMMENT=scr-transferd", "SCR_TRANSFERD_ALLOW_ROOT=1")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	syslog, _ := os.ReadFile(filepath.Join(s.dir, "syslog"))
	t.Logf("%s: status %d\n%s\nsyslog:\n%s", script, code, out, syslog)
	return code, string(syslog)
}

// TestPrologStartFailureDoesNotDrain: a prolog that fails makes Slurm drain
// the node and requeue the job held; a daemon that does not start must
// not do that. It logs the reason instead.
func TestPrologStartFailureDoesNotDrain(t *testing.T) {
	s := newSiteScript(t)
	code, syslog := s.run(t, "slurm/prolog.sh", "FAKE_SYSTEMCTL_START_STATUS=1")
	if code != 0 {
		t.Errorf("prolog exit status %d when the unit fails to start: Slurm drains the node", code)
	}
	if !strings.Contains(syslog, "scr-transferd not started") || !strings.Contains(syslog, "systemctl start") {
		t.Errorf("no log line saying the daemon was not started and why: %q", syslog)
	}
}

// TestPrologStartsTheUnit: the control directory belongs to the job's user
// with mode 0700, the drop-in names the user and the paths it may write.
func TestPrologStartsTheUnit(t *testing.T) {
	s := newSiteScript(t)
	pfs := filepath.Join(s.dir, "pfs")
	mustMkdir(t, filepath.Join(pfs, s.user))
	code, syslog := s.run(t, "slurm/prolog.sh", "SCR_TRANSFERD_RW_PATHS="+pfs+"/%u /p/scratch/%u")
	if code != 0 || !strings.Contains(syslog, "started scr-transferd@") {
		t.Fatalf("prolog: status %d, log %q", code, syslog)
	}
	// A write path missing on the node is said at once, not only by
	// failing flushes; one that exists is not.
	if !strings.Contains(syslog, "/p/scratch/"+s.user+" (SCR_TRANSFERD_RW_PATHS) does not exist") || strings.Contains(syslog, pfs+"/"+s.user+" (") {
		t.Errorf("the log does not name exactly the missing write path: %q", syslog)
	}
	cntl := filepath.Join(s.shm, s.user, "scr.55")
	st, err := os.Stat(cntl)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("control directory %s: %v %v, want mode 0700", cntl, st, err)
	}
	confs, _ := filepath.Glob(filepath.Join(s.units, "scr-transferd@*.service.d", "90-job.conf"))
	if len(confs) != 1 {
		t.Fatalf("drop-ins: %v", confs)
	}
	b, _ := os.ReadFile(confs[0])
	for _, want := range []string{"User=" + s.user, "ReadWritePaths=-" + pfs + "/" + s.user + " -/p/scratch/" + s.user} {
		if !strings.Contains(string(b), want) {
			t.Errorf("drop-in lacks %q:\n%s", want, b)
		}
	}

	// No paths: no ReadWritePaths= line, which would empty the unit's list.
	s2 := newSiteScript(t)
	if code, _ := s2.run(t, "slurm/prolog.sh", "SCR_TRANSFERD_RW_PATHS= "); code != 0 {
		t.Fatal("prolog failed")
	}
	confs, _ = filepath.Glob(filepath.Join(s2.units, "scr-transferd@*.service.d", "90-job.conf"))
	if len(confs) != 1 {
		t.Fatalf("drop-ins: %v", confs)
	}
	if b, _ := os.ReadFile(confs[0]); strings.Contains(string(b), "ReadWritePaths=") {
		t.Errorf("an empty ReadWritePaths= resets the unit's writable paths:\n%s", b)
	}
}

// TestEpilogCleansUp: the epilog stops the unit, removes its drop-in and
// metrics file, and removes the node-local cache only once nothing in it
// is left to flush.
func TestEpilogCleansUp(t *testing.T) {
	for _, pending := range []bool{false, true} {
		t.Run(map[bool]string{false: "flush complete", true: "files not flushed"}[pending], func(t *testing.T) {
			s := newSiteScript(t)
			buildTools(t, s.bin)
			if code, _ := s.run(t, "slurm/prolog.sh"); code != 0 {
				t.Fatal("prolog failed")
			}
			cntl := filepath.Join(s.shm, s.user, "scr.55")
			transfer := filepath.Join(cntl, "transfer.scrinfo")
			src := filepath.Join(cntl, "ckpt")
			if err := os.WriteFile(src, []byte("checkpoint"), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"stop", "--create", transfer}
			if pending {
				args = []string{"add", transfer, src, filepath.Join(s.dir, "pfs", "ckpt")}
			}
			if out, err := exec.Command(filepath.Join(s.bin, "scr-ctl"), args...).CombinedOutput(); err != nil {
				t.Fatalf("scr-ctl %v: %v\n%s", args, err, out)
			}
			confs, _ := filepath.Glob(filepath.Join(s.units, "*.d"))
			if len(confs) != 1 {
				t.Fatalf("drop-ins after the prolog: %v", confs)
			}
			unit := strings.TrimSuffix(filepath.Base(confs[0]), ".d")
			prom := filepath.Join(s.metrics, unit+".prom")
			if err := os.WriteFile(prom, []byte("# killed daemon's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			code, syslog := s.run(t, "slurm/epilog.sh")
			if code != 0 {
				t.Errorf("epilog exit status %d", code)
			}
			calls, _ := os.ReadFile(filepath.Join(s.dir, "systemctl"))
			if !strings.Contains(string(calls), "stop "+unit) {
				t.Errorf("the unit was not stopped: %s", calls)
			}
			if _, err := os.Stat(confs[0]); err == nil {
				t.Error("the drop-in is left")
			}
			if _, err := os.Stat(prom); err == nil {
				t.Error("the metrics file is left")
			}
			_, err := os.Stat(src)
			switch {
			case pending && err != nil:
				t.Errorf("the cache was removed with a file not flushed: %v", err)
			case pending && !strings.Contains(syslog, "keeping"):
				t.Errorf("no log line saying the cache is kept: %q", syslog)
			case !pending && err == nil:
				t.Error("the cache is left after a complete flush")
			}
		})
	}
}

// TestPrologOptIn: the prolog starts a daemon only for a job that asks for
// one under the site's rule (SCR_TRANSFERD_WHEN), never for root's jobs
// unless the site allows it, and never reloads systemd for a job.
func TestPrologOptIn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		start bool
		log   string // in the log when not started ("" : silent)
	}{
		{"no comment", []string{"SLURM_JOB_COMMENT="}, false, ""},
		{"other comment", []string{"SLURM_JOB_COMMENT=scr-transferd-not"}, false, ""},
		{"comment among words", []string{"SLURM_JOB_COMMENT=run 7, scr-transferd please"}, true, ""},
		{"root not allowed", []string{"SCR_TRANSFERD_ALLOW_ROOT=0"}, false, "a job of root"},
		{"feature asked", []string{"SCR_TRANSFERD_WHEN=feature:scrflush", "SLURM_JOB_CONSTRAINTS=intel&scrflush"}, true, ""},
		{"feature not asked", []string{"SCR_TRANSFERD_WHEN=feature:scrflush", "SLURM_JOB_CONSTRAINTS=scrflushx"}, false, ""},
		{"partition", []string{"SCR_TRANSFERD_WHEN=partition:ckpt,big", "SLURM_JOB_PARTITION=big", "SLURM_JOB_COMMENT="}, true, ""},
		{"other partition", []string{"SCR_TRANSFERD_WHEN=partition:ckpt,big", "SLURM_JOB_PARTITION=debug"}, false, ""},
		{"always", []string{"SCR_TRANSFERD_WHEN=always", "SLURM_JOB_COMMENT="}, true, ""},
		{"unknown rule", []string{"SCR_TRANSFERD_WHEN=sometimes"}, false, "SCR_TRANSFERD_WHEN=sometimes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSiteScript(t)
			code, syslog := s.run(t, "slurm/prolog.sh", tc.env...)
			if code != 0 {
				t.Fatalf("prolog exit status %d", code)
			}
			calls, _ := os.ReadFile(filepath.Join(s.dir, "systemctl"))
			started := strings.Contains(string(calls), "start scr-transferd@")
			if started != tc.start {
				t.Errorf("daemon started: %v, want %v (systemctl calls: %q)", started, tc.start, calls)
			}
			if strings.Contains(string(calls), "daemon-reload") {
				t.Errorf("the prolog reloads systemd for a job: %q", calls)
			}
			if tc.log != "" && !strings.Contains(syslog, tc.log) {
				t.Errorf("log %q does not say %q", syslog, tc.log)
			}
			if tc.log == "" && !tc.start && syslog != "" {
				t.Errorf("a job that did not ask is logged: %q", syslog)
			}
		})
	}
}

// TestPrologRefusesWrongUser: when the instance would run as another user
// than the job's (a site drop-in sorting after the prolog's 90-job.conf
// sets User=), the prolog reloads systemd once and, if that does not cure
// it, starts nothing, removes its drop-in and says why.
func TestPrologRefusesWrongUser(t *testing.T) {
	s := newSiteScript(t)
	code, syslog := s.run(t, "slurm/prolog.sh", "FAKE_SYSTEMCTL_USER=alice")
	if code != 0 {
		t.Fatalf("prolog exit status %d", code)
	}
	calls, _ := os.ReadFile(filepath.Join(s.dir, "systemctl"))
	if strings.Contains(string(calls), "start ") {
		t.Errorf("the unit was started as the wrong user: %q", calls)
	}
	if !strings.Contains(string(calls), "daemon-reload") {
		t.Errorf("no reload before giving up: %q", calls)
	}
	if !strings.Contains(syslog, "would run as 'alice', not as the job's user "+s.user) {
		t.Errorf("the log does not say the unit would run as the wrong user: %q", syslog)
	}
	if confs, _ := filepath.Glob(filepath.Join(s.units, "*.d")); len(confs) != 0 {
		t.Errorf("the drop-in is left: %v", confs)
	}
}
