package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingDirectoryRefused: a transfer file in a directory that does
// not exist (a mistyped path) is refused with a message naming the
// directory and --create-dir, exit code 1, and nothing created; with
// --create-dir the directory is created (the daemon then runs, and is
// not waited for here).
func TestMissingDirectoryRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scr.1001", "mistyped")
	var stdout, stderr bytes.Buffer
	code := run([]string{"--log-format=json", filepath.Join(dir, "transfer.scrinfo")}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit code %d; want 1. stderr:\n%s", code, stderr.String())
	}
	log := stderr.String()
	if !strings.Contains(log, `"level":"error"`) || !strings.Contains(log, "does not exist: "+dir) ||
		!strings.Contains(log, "--create-dir") {
		t.Errorf("log:\n%s\nwant an error naming %s and --create-dir", log, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory was created (%v)", err)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("its parent was created (%v)", err)
	}
}
