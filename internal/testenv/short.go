package testenv

import (
	"os"
	"testing"
)

// Long marks tb as a long test of real processes: under -short (the
// everyday `go test -short ./...`) it is skipped, saying why; the full
// run, CI's, runs it. Under CI=true -short is a mistake, since CI must
// run every test, and fails the test instead.
func Long(tb testing.TB, why string) {
	tb.Helper()
	if !testing.Short() {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("-short under CI=true: CI runs every test (%s)", why)
	}
	tb.Skipf("-short: %s", why)
}
