package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// maxExposure is the highest "systemd-analyze security" exposure accepted
// for the units (0 best, 10 worst).
const maxExposure = 3.0

// tool returns the path of a program, skipping the test if it is missing,
// or failing it under CI, which installs it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	testenv.Absent(t, "%s not installed (apt-get install %s)", name, pkg)
	return ""
}

var units = []struct {
	path string
	user bool // a user unit (systemctl --user)
}{
	{"systemd/scr-transferd@.service", false},
	{"systemd/user/scr-transferd@.service", true},
}

// instance copies the template unit into dir with ExecStart pointing at bin
// and returns the path of an instance for a transfer file, as systemd
// would load it.
func instance(t *testing.T, unit, dir, bin string) string {
	t.Helper()
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("ExecStart=/usr/local/bin/scr-transferd ")) {
		t.Fatalf("%s: ExecStart does not run /usr/local/bin/scr-transferd", unit)
	}
	reap, err := filepath.Abs("slurm/reap-caches.sh")
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("/usr/local/bin/scr-transferd-reap"), []byte(reap))
	b = bytes.ReplaceAll(b, []byte("/usr/local/bin/scr-transferd "), []byte(bin+" "))
	tmpl := filepath.Join(dir, filepath.Base(unit))
	if err := os.WriteFile(tmpl, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool(t, "systemd-escape", "systemd"), "--path", "/dev/shm/user1/scr.1001/transfer.scrinfo").Output()
	if err != nil {
		t.Fatal(err)
	}
	inst := filepath.Join(dir, "scr-transferd@"+strings.TrimSpace(string(out))+".service")
	if err := os.Symlink(filepath.Base(tmpl), inst); err != nil {
		t.Fatal(err)
	}
	return inst
}

// analyze runs systemd-analyze with a runtime directory of its own (the
// --user mode needs one).
func analyze(t *testing.T, user bool, args ...string) (string, error) {
	t.Helper()
	if user {
		args = append([]string{"--user"}, args...)
	}
	cmd := exec.Command(tool(t, "systemd-analyze", "systemd"), args...)
	rt := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt, "SYSTEMD_LOG_COLOR=0", "SYSTEMD_COLORS=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSystemdUnitsVerify(t *testing.T) {
	tool(t, "systemd-analyze", "systemd")
	bin := bins.Path(t, testenv.Daemon)
	for _, u := range units {
		t.Run(u.path, func(t *testing.T) {
			inst := instance(t, u.path, t.TempDir(), bin)
			out, err := analyze(t, u.user, "verify", inst)
			if err != nil || strings.TrimSpace(out) != "" {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", u.path, err, out)
			}
		})
	}
}

var exposure = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

func TestSystemdUnitsSecurity(t *testing.T) {
	tool(t, "systemd-analyze", "systemd")
	bin := bins.Path(t, testenv.Daemon)
	for _, u := range units {
		t.Run(u.path, func(t *testing.T) {
			inst := instance(t, u.path, t.TempDir(), bin)
			out, err := analyze(t, u.user, "security", "--offline=true", inst)
			if strings.Contains(out, "--offline") && err != nil {
				t.Skipf("this systemd-analyze has no offline security analysis: %s", out)
			}
			m := exposure.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("systemd-analyze security: %v, no exposure level in:\n%s", err, out)
			}
			score, perr := strconv.ParseFloat(m[1], 64)
			if perr != nil {
				t.Fatal(perr)
			}
			t.Logf("%s: exposure %.1f", u.path, score)
			if score > maxExposure {
				t.Errorf("%s: exposure %.1f, want at most %.1f:\n%s", u.path, score, maxExposure, out)
			}
		})
	}
}

// TestUnitsUseFlagsTheDaemonHas checks the ExecStart lines against the
// daemon's own flag parser.
func TestUnitsUseFlagsTheDaemonHas(t *testing.T) {
	bin := bins.Path(t, testenv.Daemon)
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("scr-transferd --help: %v\n%s", err, out)
	}
	flagRE := regexp.MustCompile(`\s(--[a-z-]+)=`)
	for _, u := range units {
		b, err := os.ReadFile(u.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "ExecStart=") {
				continue
			}
			for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
				if !bytes.Contains(out, []byte("\n  "+m[1]+" ")) && !bytes.Contains(out, []byte("\n  "+m[1]+"\n")) {
					t.Errorf("%s: ExecStart uses %s, which scr-transferd --help does not list", u.path, m[1])
				}
			}
		}
	}
}

func TestSlurmScriptsParse(t *testing.T) {
	bash := tool(t, "bash", "bash")
	scripts, err := filepath.Glob("slurm/*")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts in slurm/: %v", err)
	}
	for _, s := range scripts {
		if out, err := exec.Command(bash, "-n", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
		}
	}
}
