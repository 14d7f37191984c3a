// Package logging builds the daemon's logger and is the one place that
// decides how quantities read in its logs: raw numbers in the JSON format
// (bytes, bytes per second, seconds), for machines; IEC units ("512 MiB",
// "100 MiB/s") and Go durations ("1m30s") in the console format, for
// people. Code that logs a byte count or a rate uses Bytes and Rate and
// never formats the number itself.
package logging

import (
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scr-transferd/scr-transferd/internal/units"
)

// bytesUnit and rateUnit mark a numeric field as a byte count or a rate in
// bytes per second. zap ignores Field.Interface for numeric fields, so the
// JSON encoder writes the raw number; the console core rewrites the field.
type (
	bytesUnit struct{}
	rateUnit  struct{}
)

// Bytes is a byte count: raw in JSON, "1.50 GiB" on the console.
func Bytes(key string, n int64) zap.Field {
	f := zap.Int64(key, n)
	f.Interface = bytesUnit{}
	return f
}

// Rate is a rate in bytes per second: raw in JSON, "100 MiB/s" on the
// console.
func Rate(key string, bytesPerSecond float64) zap.Field {
	f := zap.Float64(key, bytesPerSecond)
	f.Interface = rateUnit{}
	return f
}

// New returns a logger writing to w in format "console" or "json" at level
// "debug", "info", "warn" or "error". When w is the stream journald reads
// (JournalStream, from the JOURNAL_STREAM variable systemd sets), each
// line is prefixed with its syslog priority, so that the journal records
// errors as errors (journalctl -p err) rather than everything at info.
func New(format, level string, w io.Writer) (*zap.Logger, error) {
	f, _ := w.(*os.File)
	return newLogger(format, level, w, JournalStream(os.Getenv("JOURNAL_STREAM"), f))
}

// newLogger is New, told whether w is the journal's stream.
func newLogger(format, level string, w io.Writer, journal bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	newCore := func(enc zapcore.Encoder) zapcore.Core {
		if journal {
			return newPrefixCore(enc, w, lvl)
		}
		return zapcore.NewCore(enc, zapcore.AddSync(w), lvl)
	}
	var core zapcore.Core
	switch format {
	case "json":
		ec.EncodeDuration = zapcore.SecondsDurationEncoder
		core = newCore(zapcore.NewJSONEncoder(ec))
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		ec.EncodeDuration = zapcore.StringDurationEncoder
		core = humanCore{newCore(zapcore.NewConsoleEncoder(ec))}
	default:
		return nil, fmt.Errorf("--log-format %q: want console or json", format)
	}
	return zap.New(core), nil
}

// humanCore writes byte counts and rates in IEC units and durations
// rounded to what a person reads.
type humanCore struct{ zapcore.Core }

func (c humanCore) With(fields []zapcore.Field) zapcore.Core {
	return humanCore{c.Core.With(humanize(fields))}
}

func (c humanCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c humanCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, humanize(fields))
}

// humanize returns fields with byte counts, rates and durations in human
// form; fields itself is left alone, as the caller may reuse it.
func humanize(fields []zapcore.Field) []zapcore.Field {
	var out []zapcore.Field
	for i, f := range fields {
		h, ok := human(f)
		if !ok {
			if out != nil {
				out = append(out, f)
			}
			continue
		}
		if out == nil {
			out = append(make([]zapcore.Field, 0, len(fields)), fields[:i]...)
		}
		out = append(out, h)
	}
	if out == nil {
		return fields
	}
	return out
}

func human(f zapcore.Field) (zapcore.Field, bool) {
	switch {
	case f.Type == zapcore.Int64Type && f.Interface == bytesUnit{}:
		return zap.String(f.Key, units.IEC(float64(f.Integer))), true
	case f.Type == zapcore.Float64Type && f.Interface == rateUnit{}:
		return zap.String(f.Key, units.IEC(math.Float64frombits(uint64(f.Integer)))+"/s"), true
	case f.Type == zapcore.DurationType:
		return zap.Duration(f.Key, roundDuration(time.Duration(f.Integer))), true
	}
	return f, false
}

// roundDuration keeps three significant digits or so: 1.234s, 12.3s, 1m23s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}
