package daemon

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

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

// logRecovered logs that f was flushed after failed attempts (r, nil if
// none), at info level: the end of the errors logged for it.
func (d *daemon) logRecovered(f transfer.File, r *retry) {
	if r == nil || r.failures == 0 {
		return
	}
	d.log.Info("recovered", zap.String("src", f.Src), zap.String("dest", f.Dest),
		zap.Int("failed_attempts", r.failures), zap.String("last_error", r.logged))
}
