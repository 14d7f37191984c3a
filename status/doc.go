// Package status is scr-ctl's model of a flush as the transfer file shows
// it: a report of every file's progress with rates, elapsed time and
// averages, its text and JSON forms, and whether a daemon serves the file.
// scr-ctl's status, wait, run, stop and exit use it; they only wire flags
// to it.
package status
