package flush

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openat2ENOSYSChild is set in the environment of the child process of
// TestConfinedCopyNamesSeccompOnENOSYS.
const openat2ENOSYSChild = "FLUSH_TEST_OPENAT2_ENOSYS_ROOT"

// refuseOpenat2 installs, on every thread of this process, a seccomp filter
// that answers openat2(2) with ENOSYS, as systemd's RestrictSUIDSGID=yes
// does. It cannot be undone: only a child process may call it.
func refuseOpenat2() error {
	const (
		seccompSetModeFilter   = 1
		seccompFilterFlagTsync = 1
		retErrno               = 0x00050000
		retAllow               = 0x7fff0000
	)
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_OPENAT2},
		{Code: unix.BPF_RET | unix.BPF_K, K: retErrno | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: retAllow},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, seccompSetModeFilter, seccompFilterFlagTsync, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return e
	}
	return nil
}

// TestConfinedCopyNamesSeccompOnENOSYS runs a confined copy in a child
// process whose openat2 answers ENOSYS and checks that the error says why.
func TestConfinedCopyNamesSeccompOnENOSYS(t *testing.T) {
	if root := os.Getenv(openat2ENOSYSChild); root != "" {
		if err := refuseOpenat2(); err != nil {
			t.Fatalf("cannot install the seccomp filter: %v", err)
		}
		job := Job{Src: filepath.Join(root, "cache", "a"), Dst: filepath.Join(root, "pfs", "a"), Size: 1000,
			SrcRoot: filepath.Join(root, "cache"), DstRoot: filepath.Join(root, "pfs")}
		_, err := NewCopier(nil, Options{}).Copy(context.Background(), job, nil)
		if err == nil {
			t.Fatal("the confined copy succeeded without openat2")
		}
		os.Stdout.WriteString("\nERROR: " + err.Error() + "\n")
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
