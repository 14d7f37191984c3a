package logging

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// JournalStream reports whether f is the stream journald reads, as
// JOURNAL_STREAM (env, "DEVICE:INODE" in decimal) says of the service's
// standard output or error: only then does a line prefixed with "<N>"
// reach the journal at priority N. A stream redirected elsewhere (a file,
// a pipe to another logger) keeps plain lines.
func JournalStream(env string, f *os.File) bool {
	if env == "" || f == nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return journalMatch(env, uint64(st.Dev), st.Ino)
}

// journalMatch reports whether env ("DEVICE:INODE") names the file of
// device dev and inode ino.
func journalMatch(env string, dev, ino uint64) bool {
	d, i, ok := strings.Cut(strings.TrimSpace(env), ":")
	if !ok {
		return false
	}
	ed, err1 := strconv.ParseUint(d, 10, 64)
	ei, err2 := strconv.ParseUint(i, 10, 64)
	return err1 == nil && err2 == nil && ed == dev && ei == ino
}

// Priority is the syslog priority of a log level, as journald takes it
// from a "<N>" prefix (sd-daemon(3)): debug 7, info 6, warn 4, error 3,
// anything more severe 2.
func Priority(l zapcore.Level) int {
	switch {
	case l <= zapcore.DebugLevel:
		return 7
	case l == zapcore.InfoLevel:
		return 6
	case l == zapcore.WarnLevel:
		return 4
	case l == zapcore.ErrorLevel:
		return 3
	}
	return 2
}

// prefixCore writes each entry as its encoder does, prefixed with
// "<N>", the entry's syslog priority, for journald.
type prefixCore struct {
	zapcore.LevelEnabler
	enc zapcore.Encoder
	out zapcore.WriteSyncer
}

func newPrefixCore(enc zapcore.Encoder, w io.Writer, lvl zapcore.LevelEnabler) zapcore.Core {
	return &prefixCore{LevelEnabler: lvl, enc: enc, out: zapcore.AddSync(w)}
}

func (c *prefixCore) With(fields []zapcore.Field) zapcore.Core {
	enc := c.enc.Clone()
	for _, f := range fields {
		f.AddTo(enc)
	}
	return &prefixCore{LevelEnabler: c.LevelEnabler, enc: enc, out: c.out}
}

func (c *prefixCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *prefixCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	line, err := c.enc.EncodeEntry(e, fields)
	if err != nil {
		return fmt.Errorf("encoding a log entry: %w", err)
	}
	defer line.Free()
	if _, err := c.out.Write(prefixed(Priority(e.Level), line.Bytes())); err != nil {
		return fmt.Errorf("writing a log entry: %w", err)
	}
	return nil
}

// prefixed returns text with "<N>" before each of its lines: journald
// reads every line of its stream as a record of its own.
func prefixed(priority int, text []byte) []byte {
	prefix := "<" + strconv.Itoa(priority) + ">"
	out := make([]byte, 0, len(text)+len(prefix)+1)
	for len(text) > 0 {
		out = append(out, prefix...)
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			out = append(append(out, text...), '\n')
			break
		}
		out = append(out, text[:i+1]...)
		text = text[i+1:]
	}
	return out
}

func (c *prefixCore) Sync() error { return c.out.Sync() }
