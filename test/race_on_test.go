//go:build race

package test

// raceEnabled builds the daemon under test with the race detector when the
// tests themselves run with it.
const raceEnabled = true
