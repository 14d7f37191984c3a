//go:build !race

package testenv

// Race reports whether this test process runs with the race detector; the
// binaries it builds with Build{Race: Race} then run with it too.
const Race = false
