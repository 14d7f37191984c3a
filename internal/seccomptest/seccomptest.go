// Package seccomptest installs the seccomp filter systemd's
// RestrictSUIDSGID=yes amounts to for openat2(2), so that tests can run
// code, or exec a daemon, under it: openat2 answers ENOSYS. Tests only.
package seccomptest

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// RefuseOpenat2 installs, on every thread of the process (and, across
// exec, of the program it runs), a filter answering openat2 with ENOSYS.
// It cannot be undone: call it in a child process.
func RefuseOpenat2() error {
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
