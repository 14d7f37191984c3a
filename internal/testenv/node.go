package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// TransferFileName is the name of the transfer file in a node's control
// directory, as SCR names it.
const TransferFileName = "transfer.scrinfo"

// Node is one compute node's directories for a test: the cache (the
// node-local storage the application checkpoints to), the PFS (where
// the daemon copies to) and the control directory holding the transfer
// file, all under one temporary root.
type Node struct {
	Root     string
	Cache    string
	PFS      string
	Control  string
	Transfer string // Control/transfer.scrinfo, not created
}

// NewNode creates a node's directories (mode 0755) under a new temporary
// directory of tb, removed when the test ends.
func NewNode(tb testing.TB) Node {
	tb.Helper()
	root := tb.TempDir()
	n := Node{
		Root:    root,
		Cache:   filepath.Join(root, "cache"),
		PFS:     filepath.Join(root, "pfs"),
		Control: filepath.Join(root, "ctl"),
	}
	n.Transfer = filepath.Join(n.Control, TransferFileName)
	for _, d := range []string{n.Cache, n.PFS, n.Control} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return n
}
