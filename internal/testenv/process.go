package testenv

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a program a test started: its output (standard output and
// standard error together, unless the test keeps one apart) is captured in
// Log, it is killed when the test ends if it is still running, and its log
// is shown if the test failed.
type Process struct {
	tb   testing.TB
	Cmd  *exec.Cmd
	Log  *SyncBuffer
	done chan struct{}
	err  error // cmd.Wait's result, set before done is closed
}

// Start starts cmd for the test tb. cmd's Stdout and Stderr go to the
// process's Log, but for one the test set (a SyncBuffer of its own, to
// tell a command's output from its messages).
func Start(tb testing.TB, cmd *exec.Cmd) *Process {
	tb.Helper()
	p := &Process{tb: tb, Cmd: cmd, Log: &SyncBuffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.Log
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Log
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if tb.Failed() {
			tb.Logf("%s log:\n%s", p.name(), p.Log.String())
		}
	})
	return p
}

// name is the program's base name, for messages.
func (p *Process) name() string {
	path := p.Cmd.Path
	return path[strings.LastIndexByte(path, '/')+1:]
}

// Done is closed once the process has exited and its output is in Log.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns the result of waiting for the process (nil for exit status
// 0); it is meaningful once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid returns the process's ID.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Signal sends s to the process, failing the test if it cannot.
func (p *Process) Signal(s syscall.Signal) {
	p.tb.Helper()
	if err := p.Cmd.Process.Signal(s); err != nil {
		p.tb.Fatal(err)
	}
}

// Wait waits for the process to exit and returns its exit code, failing
// the test if it is still running after timeout or was not started.
func (p *Process) Wait(timeout time.Duration) int {
	p.tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.tb.Fatalf("%s did not exit within %v", p.name(), timeout)
	}
	if p.Cmd.ProcessState == nil {
		p.tb.Fatalf("%s: %v", p.name(), p.err)
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Logs returns everything the process printed so far.
func (p *Process) Logs() string { return p.Log.String() }

// LogMark returns the current length of the log, so that a later
// WaitLogAfter looks only at what the process said after this point.
func (p *Process) LogMark() int { return p.Log.Len() }

// WaitLog waits until the log contains s, failing the test after timeout.
func (p *Process) WaitLog(s string, timeout time.Duration) {
	p.tb.Helper()
	if !Until(timeout, func() bool { return strings.Contains(p.Log.String(), s) }) {
		p.tb.Fatalf("log never said %q:\n%s", s, p.Log.String())
	}
}

// WaitLogAfter waits until the log, from mark on, has a line containing
// every one of parts, and returns that line. It fails the test after
// timeout, or as soon as the process has exited without saying it.
func (p *Process) WaitLogAfter(mark int, timeout time.Duration, parts ...string) string {
	p.tb.Helper()
	var found string
	ok := Until(timeout, func() bool {
		alive := p.Alive() // before reading: an exit's last words are in the log
		s := p.Log.String()
		if line, ok := lineWithAll(s[min(mark, len(s)):], parts); ok {
			found = line
			return true
		}
		if !alive {
			p.tb.Fatalf("%s exited (%v) before its log said %q:\n%s", p.name(), p.err, parts, s)
		}
		return false
	})
	if !ok {
		s := p.Log.String()
		p.tb.Fatalf("log never said %q after byte %d:\n%s", parts, mark, s[min(mark, len(s)):])
	}
	return found
}

// lineWithAll returns the first line of s that contains every one of
// parts.
func lineWithAll(s string, parts []string) (string, bool) {
	for line := range strings.Lines(s) {
		all := true
		for _, part := range parts {
			if !strings.Contains(line, part) {
				all = false
				break
			}
		}
		if all {
			return line, true
		}
	}
	return "", false
}
