package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestHelpStyleAndExamples: --help writes flags as the documentation does
// ("--allow-dest DIR", "--buf-size SIZE"), never Go's "-allow-dest value",
// and has examples.
func TestHelpStyleAndExamples(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"\n  --allow-dest DIR\n", "\n  --buf-size SIZE\n", "\n  --reread DURATION\n", "\n  --create-dir\n",
		"\nExamples:\n", "\nEnvironment:\n", "\nExit status:\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  -") && !strings.HasPrefix(l, "  --") {
			t.Errorf("Go-style flag line %q", l)
		}
		if len(l) > 80 && !strings.HasPrefix(l, "  scr-") {
			t.Errorf("line of %d columns: %q", len(l), l)
		}
	}
}

// TestManPageUpToDate: docs/man/scr-transferd.1 is what --help-man makes
// of the --help text now.
func TestManPageUpToDate(t *testing.T) {
	t.Setenv("SCR_TRANSFER_SECS", "")
	t.Setenv("SCR_FILE_BUF_SIZE", "")
	var man bytes.Buffer
	if code := run([]string{"--help-man"}, &man, &man); code != 0 {
		t.Fatalf("--help-man: exit %d: %s", code, man.String())
	}
	committed, err := os.ReadFile("../../docs/man/scr-transferd.1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, man.Bytes()) {
		t.Error("docs/man/scr-transferd.1 differs from the --help text: " +
			"env -u SCR_FILE_BUF_SIZE -u SCR_TRANSFER_SECS go run ./cmd/scr-transferd --help-man > docs/man/scr-transferd.1")
	}
	for _, want := range []string{".TH SCR-TRANSFERD 1", ".SH OPTIONS", `\fB\-\-allow\-dest\fR \fIDIR\fR`, ".SH EXAMPLES"} {
		if !bytes.Contains(man.Bytes(), []byte(want)) {
			t.Errorf("manual page lacks %q", want)
		}
	}
}
