package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// unitSection reads one section (such as "[Service]") of a unit file or
// drop-in: each key's values in order, with space-separated lists split, a
// leading "-" (ignore if missing) dropped and an empty assignment resetting
// the list, as systemd does. The key "" is present if the section is.
func unitSection(t *testing.T, path, section string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			cur = line
			if cur == section {
				m[""] = nil // the section exists
			}
		case cur == section:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: unparsable line %q", path, line)
			}
			if v == "" {
				m[k] = nil // an empty assignment resets a list
				continue
			}
			for _, w := range strings.Fields(v) {
				m[k] = append(m[k], strings.TrimPrefix(w, "-"))
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// last returns the effective value of a single-valued setting.
func last(m map[string][]string, key string) string {
	v := m[key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func isTrue(s string) bool {
	switch strings.ToLower(s) {
	case "yes", "true", "on", "1":
		return true
	}
	return false
}

// TestUnitsLeaveOpenat2Usable: RestrictSUIDSGID=yes makes systemd's seccomp
// filter answer openat2(2) with ENOSYS, which --allow-src/--allow-dest need
// for every file.
func TestUnitsLeaveOpenat2Usable(t *testing.T) {
	for _, u := range units {
		s := unitSection(t, u.path, "[Service]")
		if isTrue(last(s, "RestrictSUIDSGID")) {
			t.Errorf("%s: RestrictSUIDSGID=yes denies openat2, so every confined file fails", u.path)
		}
		for _, f := range s["SystemCallFilter"] {
			if f == "~openat2" || f == "~@file-system" {
				t.Errorf("%s: SystemCallFilter=%s denies openat2", u.path, f)
			}
		}
	}
}

// TestUnitsKeepDevShm: RemoveIPC=yes removes everything the user owns in
// /dev/shm (caches and transfer files) when the user's last unit stops.
func TestUnitsKeepDevShm(t *testing.T) {
	for _, u := range units {
		s := unitSection(t, u.path, "[Service]")
		if isTrue(last(s, "RemoveIPC")) {
			t.Errorf("%s: RemoveIPC=yes deletes the user's /dev/shm: unflushed checkpoints and the transfer file", u.path)
		}
		if !slices.Contains(s["ReadWritePaths"], "/dev/shm") {
			t.Errorf("%s: /dev/shm (SCR's control directory) is not writable", u.path)
		}
	}
}

// TestUnitsMakeTmpDestinationsFail: with PrivateTmp=yes a destination under
// /tmp or /var/tmp is written into a private directory that vanishes when
// the unit stops, after being reported complete. The units must leave
// those directories read-only instead, so that such a copy fails.
func TestUnitsMakeTmpDestinationsFail(t *testing.T) {
	for _, u := range units {
		s := unitSection(t, u.path, "[Service]")
		if last(s, "ProtectSystem") != "strict" {
			t.Errorf("%s: ProtectSystem=%s, want strict (only the listed paths writable)", u.path, last(s, "ProtectSystem"))
		}
		if isTrue(last(s, "PrivateTmp")) {
			t.Errorf("%s: PrivateTmp=yes: a destination under /tmp is flushed into a private directory and lost", u.path)
		}
		for _, d := range []string{"/tmp", "/var/tmp"} {
			if !slices.Contains(s["ReadOnlyPaths"], d) {
				t.Errorf("%s: %s is not among ReadOnlyPaths=", u.path, d)
			}
			for _, w := range s["ReadWritePaths"] {
				if w == d || strings.HasPrefix(w, d+"/") || w == "/" || w == "/var" {
					t.Errorf("%s: ReadWritePaths=%s makes %s writable", u.path, w, d)
				}
			}
		}
	}
}

// TestSystemdDropInsVerify verifies each unit with the drop-in example the
// README tells sites to install beside it (SYSTEMD_UNIT_PATH makes
// systemd-analyze read the drop-in directory next to the unit).
func TestSystemdDropInsVerify(t *testing.T) {
	sa := tool(t, "systemd-analyze", "systemd")
	bin := bins.Path(t, testenv.Daemon)
	for _, tc := range []struct {
		unit, dropin string
		user         bool
	}{
		{"systemd/scr-transferd@.service", "systemd/site.conf.example", false},
		{"systemd/user/scr-transferd@.service", "systemd/user/destinations.conf.example", true},
	} {
		t.Run(tc.dropin, func(t *testing.T) {
			dir := t.TempDir()
			inst := instance(t, tc.unit, dir, bin)
			// System: the drop-in directory beside the unit, on
			// SYSTEMD_UNIT_PATH. User: in $XDG_CONFIG_HOME/systemd/user,
			// where the README installs it (replacing the search path
			// would make the user manager's default units fail).
			d := filepath.Join(dir, "scr-transferd@.service.d")
			env := []string{"SYSTEMD_UNIT_PATH=" + dir + ":"}
			if tc.user {
				cfg := t.TempDir()
				d = filepath.Join(cfg, "systemd", "user", "scr-transferd@.service.d")
				env = []string{"XDG_CONFIG_HOME=" + cfg}
			}
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(tc.dropin)
			if err != nil {
				t.Fatal(err)
			}
			// A key systemd does not know would only be warned about:
			// this line proves the drop-in is read.
			b = append(b, []byte("\nNotAKeyOfSystemd=1\n")...)
			if err := os.WriteFile(filepath.Join(d, "site.conf"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"verify", inst}
			if tc.user {
				args = append([]string{"--user"}, args...)
			}
			cmd := exec.Command(sa, args...)
			// Short: sockets of the user's units are made under it.
			rt, err := os.MkdirTemp("", "rt")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(rt) })
			cmd.Env = append(append(os.Environ(), env...), "XDG_RUNTIME_DIR="+rt, "SYSTEMD_LOG_COLOR=0")
			out, err := cmd.CombinedOutput()
			var other []string
			read := false
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				switch {
				case strings.Contains(l, "NotAKeyOfSystemd"):
					read = true
				case l != "":
					other = append(other, l)
				}
			}
			if err != nil || len(other) > 0 || !read {
				t.Fatalf("systemd-analyze verify %s with %s (drop-in read: %v): %v\n%s", tc.unit, tc.dropin, read, err, out)
			}
		})
	}
}
