package daemon

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scr-transferd/scr-transferd/internal/logging"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// logFailure logs a failed attempt on f once per change of its error: the
// first failure, and a failure whose error differs from the one before, at
// error level with the wait before the next attempt; a repeat of the same
// error at debug level, so that a file failing the same way for hours (a
// source that never appears, a full file system) does not fill the log.
// The transfer file's ERROR follows the same rule by itself: a rewrite that
// would leave the file as it is is not made (hashfile.Store.Update).
func (d *daemon) logFailure(f transfer.File, err error, r *retry) {
	msg := transfer.ErrorValue(err.Error())
	r.failures++
	level := zapcore.ErrorLevel
	if msg == r.logged {
		level = zapcore.DebugLevel
	}
	r.logged = msg
	if ce := d.log.Check(level, "copy failed"); ce != nil {
		ce.Write(zap.String("src", f.Src), zap.String("dest", f.Dest), zap.Error(err),
			zap.Duration("retry_in", r.wait), zap.Int("attempt", r.failures))
	}
}

// logAttempt logs the start of a copy of f: at info level the first
// attempt, at debug level a retry after failures (r, nil if none), whose
// outcome the failure's own line already told ("copy failed" with
// retry_in) and the next tells ("recovered", or a changed error).
func (d *daemon) logAttempt(f transfer.File, r *retry) {
	level := zapcore.InfoLevel
	if r != nil && r.failures > 0 {
		level = zapcore.DebugLevel
	}
	if ce := d.log.Check(level, "copy"); ce != nil {
		fields := []zap.Field{zap.String("src", f.Src), zap.String("dest", f.Dest),
			logging.Bytes("size", f.Size), logging.Bytes("from", f.Written)}
		if level == zapcore.DebugLevel {
			fields = append(fields, zap.Int("attempt", r.failures+1))
		}
		ce.Write(fields...)
	}
}

// logGaveUp logs the end of the attempts on a failing file whose FILES
// entry the library removed (r: its back-off): the outcome of the errors
// logged for it, when there were any.
func (d *daemon) logGaveUp(src string, r *retry) {
	if r == nil || r.failures == 0 {
		return
	}
	d.log.Warn("gave up: the library removed the FILES entry of a failing file", zap.String("src", src),
		zap.Int("failed_attempts", r.failures), zap.String("last_error", r.logged))
}

// logRecovered logs that f was flushed after failed attempts (r, nil if
// none), at info level: the end of the errors logged for it.
func (d *daemon) logRecovered(f transfer.File, r *retry) {
	if r == nil || r.failures == 0 {
		return
	}
	d.log.Info("recovered", zap.String("src", f.Src), zap.String("dest", f.Dest),
		zap.Int("failed_attempts", r.failures), zap.String("last_error", r.logged))
}

// warnProblems logs each top-level problem of the transfer file (a BW or
// PERCENT out of range or unusable, a COMMAND with several values) when it
// appears: once while it stands, not on every pass, and again if it comes
// back after a pass without it. Each line says what is in force. It
// returns the problems of this pass, to pass in next time.
func warnProblems(log *zap.Logger, problems []error, before map[string]bool, inForce limits) map[string]bool {
	now := make(map[string]bool, len(problems))
	for _, p := range problems {
		key := p.Error()
		now[key] = true
		if !before[key] {
			log.Warn("transfer file value not taken as written", zap.Error(p),
				limitField("bw_in_force", inForce.bw, logging.Rate("bw_in_force", inForce.bw)),
				percentField("percent_in_force", inForce.percent))
		}
	}
	return now
}

// percentField is a PERCENT for the log: "unlimited" for 0 and 100 and
// above, as the throttle takes them.
func percentField(key string, p float64) zap.Field {
	if p >= transfer.MaxPercent {
		p = 0
	}
	return limitField(key, p, zap.Float64(key, p))
}
