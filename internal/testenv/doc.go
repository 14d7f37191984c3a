// Package testenv is the harness shared by every test that runs the
// project's real processes: the scr-transferd and scr-ctl binaries built
// once per test process (Binaries), a concurrency-safe log buffer
// (SyncBuffer), a poll of a condition against a deadline (WaitFor), a
// started process whose output is captured (Process), the golden-file
// convention (Golden, rewritten with -update) and the -short convention
// (Long).
//
// It keeps no package-level state but the -update flag: what a TestMain
// builds is a value (*Binaries) that the test package holds.
//
// testenv imports no package of the project, so that any package's own
// tests may use it without an import cycle.
package testenv
