// Package testenv is the harness shared by every test that runs the
// project's real processes: the scr-transferd and scr-ctl binaries built
// once per test process (Binaries), a concurrency-safe log buffer
// (SyncBuffer), a poll of a condition against a deadline (WaitFor, Until,
// UntilEvery), a started process whose output is captured (Process), a
// compute node's directories (Node), the golden-file convention (Golden,
// rewritten with -update), the -short convention (Long) and the rule for
// what a machine lacks (Absent: skipped here, a failure under CI=true).
//
// It keeps no package-level state but the -update flag: what a TestMain
// builds is a value (*Binaries) that the test package holds.
//
// testenv imports no package of the project, so that any package's own
// tests may use it without an import cycle.
package testenv
