package main

import (
	"fmt"
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
	if want := "1 file, 8.00 MiB in all; this flush wrote 8.00 MiB in 4.0s, 2.00 MiB/s; waited 1.0s"; got != want {
		t.Errorf("with a record:\n got %q\nwant %q", got, want)
	}
	got = summaryText(first, noRecord, time.Second, t0.Add(time.Hour))
	if want := "1 file, 8.00 MiB in all; 8.00 MiB written while waiting; waited 1.0s"; got != want {
		t.Errorf("without a record:\n got %q\nwant %q", got, want)
	}
}

// TestSummaryOfAResumedFlush: a flush resumed after a restart copies what
// was left; the summary says what this flush wrote, in its own time, apart
// from the flush's totals (it once read "2004 files, 1.03 GiB …; the flush
// took 0.5s, 468 MiB/s" when 239 MiB were copied in that run).
func TestSummaryOfAResumedFlush(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tree := hashfile.New()
	var files []transfer.File
	for i := range 4 {
		f := transfer.File{Src: fmt.Sprintf("/c/%d", i), Dest: fmt.Sprintf("/p/%d", i), Size: 256 << 20}
		transfer.AddFile(tree, f.Src, f.Dest, f.Size)
		files = append(files, f)
	}
	// 768 MiB were written by an earlier daemon; this one begins with 256
	// MiB left and writes them in 2 s.
	for _, f := range files[:3] {
		transfer.SetWritten(tree, f, f.Size)
		transfer.SetCRC(tree, f, 1)
	}
	transfer.SetCommand(tree, transfer.Run)
	transfer.SetState(tree, transfer.Running)
	transfer.BeginFlush(tree, t0, 768<<20)
	first := transfer.Read(tree)
	transfer.SetWritten(tree, files[3], files[3].Size)
	transfer.SetCRC(tree, files[3], 1)
	transfer.SetDone(tree, true)
	transfer.EndFlush(tree, t0.Add(2*time.Second), 1<<30)
	got := summaryText(first, transfer.Read(tree), 2500*time.Millisecond, t0.Add(time.Hour))
	want := "4 files, 1.00 GiB in all; this flush wrote 256 MiB in 2.0s, 128 MiB/s (768 MiB were written before it); waited 2.5s"
	if got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}
