package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestMetricsDirectoryNotWorldWritable applies the shipped sysusers.d and
// tmpfiles.d entries to an empty root as systemd does on a node: the
// textfile directory is created with the group scr-transferd, set-group-ID
// and sticky, writable by that group and by no other user; the system unit
// gives its daemons that group.
func TestMetricsDirectoryNotWorldWritable(t *testing.T) {
	sysusers := tool(t, "systemd-sysusers", "systemd")
	tmpfiles := tool(t, "systemd-tmpfiles", "systemd")
	root := t.TempDir()
	for _, d := range []string{"etc/sysusers.d", "etc/tmpfiles.d", "var/lib/prometheus"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Installed as deploy/systemd/README.md says.
	for src, dst := range map[string]string{
		"systemd/scr-transferd.sysusers.example": "etc/sysusers.d/scr-transferd.conf",
		"systemd/scr-transferd.tmpfiles.example": "etc/tmpfiles.d/scr-transferd.conf",
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range [][]string{
		{sysusers, "--root=" + root, filepath.Join(root, "etc/sysusers.d/scr-transferd.conf")},
		{tmpfiles, "--root=" + root, "--create", filepath.Join(root, "etc/tmpfiles.d/scr-transferd.conf")},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	group, err := os.ReadFile(filepath.Join(root, "etc/group"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^scr-transferd:[^:]*:(\d+):(.*)$`).FindStringSubmatch(string(group))
	if m == nil || m[2] != "" {
		t.Fatalf("/etc/group: %q; want the group scr-transferd without members", group)
	}
	fi, err := os.Stat(filepath.Join(root, "var/lib/prometheus/node-exporter"))
	if err != nil {
		t.Fatal(err)
	}
	mode := fi.Mode()
	if mode.Perm()&0o002 != 0 || mode.Perm()&0o070 != 0o070 || mode&os.ModeSetgid == 0 || mode&os.ModeSticky == 0 {
		t.Errorf("textfile directory mode %v; want group-writable, set-group-ID, sticky, not writable by others", mode)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || m[1] != strconv.FormatUint(uint64(st.Gid), 10) {
		t.Errorf("textfile directory owned by %d:%d; want root:scr-transferd (%s)", st.Uid, st.Gid, m[1])
	}
	unit, err := os.ReadFile("systemd/scr-transferd@.service")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^SupplementaryGroups=scr-transferd$`).Match(unit) {
		t.Error("scr-transferd@.service does not give its daemon the group scr-transferd (SupplementaryGroups=)")
	}
}
