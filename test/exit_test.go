package test

import (
	"strings"
	"testing"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestLeftoverExit: a COMMAND EXIT an earlier daemon already obeyed (it
// recorded STATE EXITING) does not make a newly started daemon exit: it
// removes the leftover, says so, records STOPPED and serves the next
// COMMANDs, EXIT included.
func TestLeftoverExit(t *testing.T) {
	n := newNode(t)
	p, data := n.checkpoint("a.ckpt", 1*mib)
	n.add(p, n.dest("a.ckpt"))
	n.library(func(t *hashfile.Tree) {
		transfer.SetCommand(t, transfer.Exit)
		transfer.SetState(t, transfer.Exiting)
	})
	d := n.start()
	n.waitFor("STATE STOPPED without COMMAND", settle, func(v transfer.View) bool {
		return v.State == transfer.Stopped && v.Command == ""
	})
	d.WaitLog("COMMAND EXIT left from an earlier run", settle)
	if !d.Alive() {
		t.Fatal("the daemon exited on a leftover EXIT")
	}
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Run) })
	n.waitFor("DONE", settle, done)
	sameFile(t, n.dest("a.ckpt"), data)
	n.library(func(t *hashfile.Tree) { transfer.SetCommand(t, transfer.Exit) })
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d after EXIT", code)
	}
	if st := n.view().State; st != transfer.Exiting {
		t.Errorf("STATE %q after EXIT, want EXITING", st)
	}
}

// TestPendingExitAtStart: an EXIT no daemon answered yet (STATE is not
// EXITING: its daemon died first) is obeyed by the next one.
func TestPendingExitAtStart(t *testing.T) {
	n := newNode(t)
	n.library(func(t *hashfile.Tree) {
		transfer.SetCommand(t, transfer.Exit)
		transfer.SetState(t, transfer.Running)
	})
	d := n.start()
	if code := d.Wait(settle); code != 0 {
		t.Fatalf("exit code %d on a pending EXIT", code)
	}
	if v := n.view(); v.State != transfer.Exiting || v.Command != transfer.Exit {
		t.Errorf("STATE %q, COMMAND %q after a pending EXIT, want EXITING and EXIT", v.State, v.Command)
	}
	if log := d.Log.String(); !strings.Contains(log, "exiting on COMMAND EXIT") {
		t.Errorf("log does not say %q:\n%s", "exiting on COMMAND EXIT", log)
	}
}
