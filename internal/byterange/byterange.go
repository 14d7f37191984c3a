// Package byterange holds Range, the one type for a span of a file's bytes
// that holds data: cache reports a checkpoint's data ranges in it, flush
// copies the ranges it is given, and cache/cachetest's encoders say where
// they put data with it. It is a package of its own because cachetest, which
// cache's tests import, cannot import cache.
package byterange

// Range is the byte range [Off, Off+Len) of a file.
type Range struct{ Off, Len int64 }

// End returns Off+Len.
func (r Range) End() int64 { return r.Off + r.Len }
