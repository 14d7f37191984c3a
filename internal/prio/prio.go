// Package prio makes the daemon yield to the application: a higher nice
// value and, optionally, the idle I/O scheduling class, on every thread of
// the process.
//
// On Linux both are attributes of a thread, not of the process:
// setpriority(PRIO_PROCESS, 0) and ioprio_set(IOPRIO_WHO_PROCESS, 0) change
// the calling thread only, and a Go program has several threads before main
// runs (the copy may run on any of them). A new thread inherits both from
// the thread that creates it, and exec keeps the calling thread's. So Lower
// sets them on its own (locked) thread and re-executes the program: every
// thread of the new image descends from that one. If the re-exec fails it
// sets every existing thread instead, until a pass finds none left to
// change, after which new threads inherit the values.
package prio

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Marker is the environment variable that tells the re-executed program
// the priority is already lowered (its value: the settings applied).
const Marker = "SCR_TRANSFERD_PRIORITY_LOWERED"

// I/O priority constants of ioprio_set(2).
const (
	ioprioClassShift = 13
	ioprioClassIdle  = 3
	ioprioWhoProcess = 1
)

// Settings say how far to lower the priority.
type Settings struct {
	Nice   int  // added to the current nice value (capped at 19); 0 leaves it
	IOIdle bool // the idle I/O class
}

func (s Settings) String() string { return fmt.Sprintf("nice+%d,ioidle=%t", s.Nice, s.IOIdle) }

// Lower lowers the priority of every thread, now and later, by re-executing
// the program (argv and environment kept, plus Marker) once the calling
// thread has the new values; on success it does not return. In the
// re-executed program (Marker set) it removes Marker from the environment
// and returns (false, nil). When the re-exec fails it sets every thread of
// the process and returns (true, the exec error) for the caller to log.
func Lower(s Settings) (fellBack bool, err error) {
	if s.Nice == 0 && !s.IOIdle {
		return false, nil
	}
	if v, ok := os.LookupEnv(Marker); ok {
		os.Unsetenv(Marker)
		if v == s.String() {
			return false, nil
		}
	}
	runtime.LockOSThread()
	// The thread stays locked: if exec fails, this goroutine goes on to
	// run the daemon on it, which does no harm.
	if err := SetThread(unix.Gettid(), s); err != nil {
		return false, err
	}
	exe, err := os.Executable()
	if err == nil {
		env := append(os.Environ(), Marker+"="+s.String())
		err = syscall.Exec(exe, os.Args, env)
	}
	if serr := SetAll(s); serr != nil {
		return true, errors.Join(fmt.Errorf("re-exec: %w", err), serr)
	}
	return true, fmt.Errorf("re-exec %s: %w (every current thread lowered instead)", exe, err)
}

// SetThread lowers the priority of thread tid.
func SetThread(tid int, s Settings) error {
	var errs []error
	if s.Nice > 0 {
		// The raw getpriority returns 20-nice.
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err == nil {
			err = unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-cur+s.Nice, 19))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("nice of thread %d: %w", tid, err))
		}
	}
	if s.IOIdle {
		if _, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), ioprioClassIdle<<ioprioClassShift); e != 0 {
			errs = append(errs, fmt.Errorf("idle I/O class of thread %d: %w", tid, e))
		}
	}
	return errors.Join(errs...)
}

// SetAll lowers every thread of the process to the values of s, relative
// to the nice value the calling thread had, repeating until a pass over
// /proc/self/task finds every thread done (a thread created meanwhile by
// one not yet changed is caught by the next pass).
func SetAll(s Settings) error {
	target := -1
	if s.Nice > 0 {
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
		if err != nil {
			return fmt.Errorf("nice: %w", err)
		}
		target = min(20-cur+s.Nice, 19)
	}
	for pass := 0; pass < 100; pass++ {
		tids, err := Threads(os.Getpid())
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			c, err := setTo(tid, target, s.IOIdle)
			if errors.Is(err, unix.ESRCH) {
				continue // the thread has exited
			}
			if err != nil {
				return err
			}
			changed = changed || c
		}
		if !changed {
			return nil
		}
	}
	return errors.New("threads kept appearing with the old priority")
}

// setTo gives thread tid nice value nice (unless negative) and the idle
// I/O class if idle, reporting whether anything had to change.
func setTo(tid, nice int, idle bool) (bool, error) {
	changed := false
	if nice >= 0 {
		cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			return false, err
		}
		if 20-cur != nice {
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
				return false, err
			}
			changed = true
		}
	}
	if idle {
		class, err := IOClass(tid)
		if err != nil {
			return false, err
		}
		if class != ioprioClassIdle {
			if _, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), ioprioClassIdle<<ioprioClassShift); e != 0 {
				return false, e
			}
			changed = true
		}
	}
	return changed, nil
}

// IOClass returns the I/O scheduling class of thread tid (0 none, 1
// real-time, 2 best-effort, 3 idle).
func IOClass(tid int) (int, error) {
	r, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if e != 0 {
		return 0, e
	}
	return int(r) >> ioprioClassShift, nil
}

// Threads lists the thread IDs of process pid.
func Threads(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
