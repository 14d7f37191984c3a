package cliflag

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestHelpTextAndMan(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Bool("quiet", false, "say nothing")
	fs.Duration("timeout", time.Minute, "give up after this long")
	fs.String("dir", "", "work in this directory")
	fs.Int("n", 3, "how many")
	h := Help{Name: "x", Synopsis: "[flags] FILE", Summary: "do x", Description: "Does x.\n\n.dotted line",
		Placeholders: map[string]string{"dir": "DIR"},
		Sections:     []Section{{Title: "Examples", Body: "Run it:\n  x --dir /tmp FILE"}}}
	var text, man bytes.Buffer
	h.Text(&text, fs)
	for _, want := range []string{"usage: x [flags] FILE\n", "\n  --dir DIR\n        work in this directory\n",
		"\n  --quiet\n", "\n  --timeout DURATION\n        give up after this long (default 1m0s)\n", "\n  --n N\n",
		"\nExamples:\nRun it:\n  x --dir /tmp FILE\n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	h.Man(&man, fs, "x")
	for _, want := range []string{".TH X 1 \"\" \"x\" \"User Commands\"\n", ".SH NAME\nx \\- do x\n",
		".TP\n\\fB\\-\\-dir\\fR \\fIDIR\\fR\nwork in this directory\n", "\\&.dotted line\n",
		".SH EXAMPLES\nRun it:\n.PP\n.nf\n.RS 4\nx \\-\\-dir /tmp FILE\n.RE\n.fi\n"} {
		if !strings.Contains(man.String(), want) {
			t.Errorf("man lacks %q:\n%s", want, man.String())
		}
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aaa bbb ccc dddddddddddd e", "  ", 10)
	if want := "  aaa bbb\n  ccc\n  dddddddddddd\n  e\n"; got != want {
		t.Errorf("wrap = %q; want %q", got, want)
	}
}
