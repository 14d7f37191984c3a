package main

import (
	"errors"
	"io/fs"

	"github.com/scr-transferd/scr-transferd/daemon"
	"github.com/scr-transferd/scr-transferd/internal/instance"
)

// Exit statuses of a daemon that cannot start. Service managers and job
// scripts tell permanent failures apart by them: a restart cannot cure
// exitServed or exitRefused (the units list them in
// RestartPreventExitStatus=), while exitFailed may be transient. exitUsage
// is permanent too, but Go's runtime exits 2 as well after a crash, which
// must restart.
const (
	exitFailed  = 1 // any other reason it cannot start
	exitUsage   = 2 // wrong command line or environment (bad configuration)
	exitServed  = 3 // another daemon already serves the transfer file
	exitRefused = 4 // permission denied or an unsafe control directory: the wrong user
)

// startFailureStatus returns the exit status for err, the error that kept
// the daemon from starting.
func startFailureStatus(err error) int {
	var held *instance.HeldError
	switch {
	case errors.As(err, &held):
		return exitServed
	case errors.Is(err, fs.ErrPermission) || daemon.IsRefusal(err):
		return exitRefused
	}
	return exitFailed
}
