package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestManPageUpToDate: docs/man/scr-ctl.1 is what --help-man makes of the
// help texts now.
func TestManPageUpToDate(t *testing.T) {
	r := inproc(context.Background(), "--help-man")
	wantCode(t, r, exitOK, "--help-man")
	committed, err := os.ReadFile("../../docs/man/scr-ctl.1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, []byte(r.stdout)) {
		t.Error("docs/man/scr-ctl.1 differs from the --help texts: go run ./cmd/scr-ctl --help-man > docs/man/scr-ctl.1")
	}
	for _, want := range []string{".TH SCR-CTL 1", ".SH SCR\\-CTL STATUS", ".SH EXAMPLES"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("manual page lacks %q", want)
		}
	}
}

// TestHelpHasExamplesAndDoubleDashes: scr-ctl --help ends with examples,
// and a command's flags read "--flag VALUE", as the documentation writes
// them.
func TestHelpHasExamplesAndDoubleDashes(t *testing.T) {
	r := inproc(context.Background(), "--help")
	if !strings.Contains(r.stdout, "\nExamples:\n  scr-ctl status --watch ") {
		t.Errorf("scr-ctl --help has no examples:\n%s", r.stdout)
	}
	r = inproc(context.Background(), "add", "--help")
	if !strings.Contains(r.stdout, "\n  --size SIZE\n") || strings.Contains(r.stdout, "\n  -size") {
		t.Errorf("scr-ctl add --help:\n%s", r.stdout)
	}
}
