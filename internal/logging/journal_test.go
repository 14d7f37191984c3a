package logging

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// TestJournalPrefixes: on the journal's stream every line carries the
// sd-daemon priority of its level, in both formats; elsewhere none does.
func TestJournalPrefixes(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		for _, journal := range []bool{true, false} {
			var buf bytes.Buffer
			log, err := newLogger(format, "debug", &buf, journal)
			if err != nil {
				t.Fatal(err)
			}
			log = log.With(zap.String("transfer_file", "/c/t"))
			log.Debug("committed WRITTEN", Bytes("written", 1<<20))
			log.Info("started")
			log.Warn("transfer file value not taken as written")
			log.Error("copy failed", zap.Error(fmt.Errorf("open: no such file")))
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			if len(lines) != 4 {
				t.Fatalf("%s: %d lines:\n%s", format, len(lines), buf.String())
			}
			for i, p := range []string{"<7>", "<6>", "<4>", "<3>"} {
				has := strings.HasPrefix(lines[i], p)
				if has != journal || strings.HasPrefix(lines[i], "<") != journal {
					t.Errorf("%s, journal %v: line %q; prefix %s wanted: %v", format, journal, lines[i], p, journal)
				}
				if !strings.Contains(lines[i], "/c/t") {
					t.Errorf("%s: line %q lost the logger's fields", format, lines[i])
				}
			}
			if format == "console" && !strings.Contains(lines[0], "1.00 MiB") {
				t.Errorf("console line %q: byte count not in IEC units", lines[0])
			}
		}
	}
}

func TestPrefixedMultiline(t *testing.T) {
	got := string(prefixed(3, []byte("copy failed\nstack line\n")))
	if want := "<3>copy failed\n<3>stack line\n"; got != want {
		t.Errorf("prefixed = %q; want %q", got, want)
	}
	if got := string(prefixed(6, []byte("no newline"))); got != "<6>no newline\n" {
		t.Errorf("prefixed = %q", got)
	}
}

func TestPriority(t *testing.T) {
	for l, want := range map[zapcore.Level]int{zapcore.DebugLevel: 7, zapcore.InfoLevel: 6, zapcore.WarnLevel: 4,
		zapcore.ErrorLevel: 3, zapcore.DPanicLevel: 2, zapcore.FatalLevel: 2} {
		if got := Priority(l); got != want {
			t.Errorf("Priority(%v) = %d; want %d", l, got, want)
		}
	}
}

// TestJournalStream: JOURNAL_STREAM names the stream by device and inode;
// only that file is taken for the journal.
func TestJournalStream(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	journal, other := open("journal"), open("other")
	var st unix.Stat_t
	if err := unix.Fstat(int(journal.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, tc := range []struct {
		env  string
		f    *os.File
		want bool
	}{
		{env, journal, true},
		{env, other, false},
		{"", journal, false},
		{"garbage", journal, false},
		{fmt.Sprintf("%d:%d", st.Dev+1, st.Ino), journal, false},
		{env, nil, false},
	} {
		if got := JournalStream(tc.env, tc.f); got != tc.want {
			t.Errorf("JournalStream(%q, %v) = %v; want %v", tc.env, tc.f, got, tc.want)
		}
	}
}

// FuzzJournalMatch: the JOURNAL_STREAM decoder never panics and matches
// only the device and inode it names.
func FuzzJournalMatch(f *testing.F) {
	f.Add("8:1234", uint64(8), uint64(1234))
	f.Add("", uint64(0), uint64(0))
	f.Add(":", uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, env string, dev, ino uint64) {
		if journalMatch(env, dev, ino) && strings.TrimSpace(env) != fmt.Sprintf("%d:%d", dev, ino) &&
			!strings.Contains(env, "+") && !strings.Contains(env, "0") {
			t.Fatalf("%q matched %d:%d", env, dev, ino)
		}
	})
}
