package main

import (
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// TestSummaryUsesTheFlushRecord: wait's closing line gives the flush's own
// time and average where the daemon recorded them, not the bytes that
// happened to be committed while the wait lasted (one commit of a copy
// begun long before would read as a rate above BW); without a record, it
// falls back to those.
func TestSummaryUsesTheFlushRecord(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f := transfer.File{Src: "/c/a", Dest: "/p/a", Size: 8 << 20}
	tree := hashfile.New()
	transfer.AddFile(tree, f.Src, f.Dest, f.Size)
	transfer.SetCommand(tree, transfer.Run)
	transfer.SetState(tree, transfer.Running)
	transfer.BeginFlush(tree, t0, 0)
	first := transfer.Read(tree)
	transfer.SetWritten(tree, f, f.Size)
	transfer.SetCRC(tree, f, 1)
	transfer.SetDone(tree, true)
	transfer.SetState(tree, transfer.Stopped)
	noRecord := transfer.Read(tree)
	noRecord.Flush = transfer.Flush{}
	transfer.EndFlush(tree, t0.Add(4*time.Second), f.Size)
	final := transfer.Read(tree)

	got := summaryText(first, final, time.Second, t0.Add(time.Hour))
	if want := "1 files, 8.00 MiB (8388608 bytes); waited 1.0s; the flush took 4.0s, 2.00 MiB/s on average"; got != want {
		t.Errorf("with a record:\n got %q\nwant %q", got, want)
	}
	got = summaryText(first, noRecord, time.Second, t0.Add(time.Hour))
	if want := "1 files, 8.00 MiB (8388608 bytes); waited 1.0s, 8.00 MiB written meanwhile, 8.00 MiB/s on average"; got != want {
		t.Errorf("without a record:\n got %q\nwant %q", got, want)
	}
}
