package flush

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/seccomptest"
)

// openat2ENOSYSChild is set in the environment of the child process of
// TestConfinedCopyNamesSeccompOnENOSYS.
const openat2ENOSYSChild = "FLUSH_TEST_OPENAT2_ENOSYS_ROOT"

// TestConfinedCopyNamesSeccompOnENOSYS runs a confined copy in a child
// process whose openat2 answers ENOSYS and checks that the error says why.
func TestConfinedCopyNamesSeccompOnENOSYS(t *testing.T) {
	if root := os.Getenv(openat2ENOSYSChild); root != "" {
		if err := seccomptest.RefuseOpenat2(); err != nil {
			t.Fatalf("cannot install the seccomp filter: %v", err)
		}
		job := Job{Src: filepath.Join(root, "cache", "a"), Dst: filepath.Join(root, "pfs", "a"), Size: 1000,
			SrcRoot: filepath.Join(root, "cache"), DstRoot: filepath.Join(root, "pfs")}
		_, err := NewCopier(nil, Options{}).Copy(context.Background(), job, nil)
		if err == nil {
			t.Fatal("the confined copy succeeded without openat2")
		}
		os.Stdout.WriteString("\nERROR: " + err.Error() + "\n")
		if err := CheckConfinement(filepath.Join(root, "pfs")); !errors.Is(err, ErrNoOpenat2) {
			t.Errorf("CheckConfinement under the filter: %v, want ErrNoOpenat2", err)
		}
		return
	}
	root := t.TempDir()
	for _, d := range []string{"cache", "pfs"} {
		mustOK(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	writeFile(t, filepath.Join(root, "cache", "a"), randBytes(1000, 3))
	cmd := exec.Command(os.Args[0], "-test.run=^TestConfinedCopyNamesSeccompOnENOSYS$", "-test.v")
	cmd.Env = append(os.Environ(), openat2ENOSYSChild+"="+root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var msg string
	for _, line := range strings.Split(string(out), "\n") {
		if m, ok := strings.CutPrefix(line, "ERROR: "); ok {
			msg = m
		}
	}
	for _, want := range []string{"function not implemented", "seccomp", "RestrictSUIDSGID=yes", "openat2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q\nchild output:\n%s", msg, want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "pfs", "a")); err == nil {
		t.Error("the destination was written without confinement")
	}
}
