package testenv

import (
	"fmt"
	"os"
	"testing"
)

// underCI reports whether the tests run in CI (CI=true), where .ci/run
// provides everything they need and runs every test.
func underCI() bool { return os.Getenv("CI") == "true" }

// Long marks tb as a long test of real processes: under -short (the
// everyday `go test -short ./...`) it is skipped, saying why; the full
// run, CI's, runs it. Under CI=true -short is a mistake, since CI must
// run every test, and fails the test instead.
func Long(tb testing.TB, why string) {
	tb.Helper()
	if !testing.Short() {
		return
	}
	if underCI() {
		tb.Fatalf("-short under CI=true: CI runs every test (%s)", why)
	}
	tb.Skipf("-short: %s", why)
}

// Absent ends a test that needs something this machine lacks (root, a
// tool, a file system, a cluster): it skips the test with the reason
// given by format and args, say how to provide it; under CI=true, where
// .ci/run provides it, it fails the test instead.
func Absent(tb testing.TB, format string, args ...any) {
	tb.Helper()
	absent(tb, underCI(), fmt.Sprintf(format, args...))
}

// absent is Absent with CI's presence as an argument.
func absent(tb testing.TB, ci bool, msg string) {
	tb.Helper()
	if ci {
		tb.Fatalf("missing under CI=true, which provides it: %s", msg)
	}
	tb.Skip(msg)
}
