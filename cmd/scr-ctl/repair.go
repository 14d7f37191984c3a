package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/status"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpRepair = `
Salvages a transfer file that does not decode (a CRC mismatch, a truncated
or damaged file: every other command, and the daemon, then fail on it with
that message). Under the same exclusive lock as the SCR library, it:

  1. copies the file as it is to TRANSFERFILE.corrupt-YYYYMMDDTHHMMSSZ
     beside it (synced before anything else is written);
  2. keeps what decodes: every element read before the point where the
     bytes stop making sense, at every level (a damaged header, size or
     CRC is noted and the tree read all the same);
  3. drops the FILES entry that was being decoded there (the library adds
     it again at its next flush), and a second element with a key already
     seen;
  4. resets every FILES entry kept to WRITTEN 0, without CRC or ERROR, and
     removes FLAG DONE and the FLUSH record: the values of a file whose
     bytes changed cannot be trusted, and a WRITTEN read wrong would make
     the daemon skip bytes it never copied. The daemon copies those files
     again at the next RUN;
  5. writes the result in place and syncs it.

It prints what was wrong, what it kept, each thing it dropped or reset,
and the backup's name. A file that decodes is left alone (exit status 0).
--dry-run says all that and writes nothing.

A daemon serving the file picks the repaired file up at its next reading.
Then check it with scr-ctl status; the job's next flush (or scr-ctl run)
copies the files again.`

func cmdRepair(e *env, args []string) error {
	fs := newFlags("repair")
	dry := fs.Bool("dry-run", false, "say what would be kept and dropped, write nothing")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "exactly one TRANSFERFILE"); err != nil {
		return err
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	path := store.Path()
	var report []string
	_, err = store.Replace(e.ctx, func(raw []byte) (*hashfile.Tree, error) {
		if _, err := hashfile.Decode(declaredImage(raw)); err == nil {
			report = append(report, "decodes: nothing to repair")
			return nil, nil
		}
		t, lines := repairTree(raw)
		report = append(report, lines...)
		if *dry {
			report = append(report, "--dry-run: nothing written")
			return nil, nil
		}
		backup, err := keepBackup(path, raw, e.now())
		if err != nil {
			return nil, err
		}
		report = append(report, "the corrupt file is kept as "+backup, "repaired: check it with scr-ctl status "+path)
		return t, nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: no such transfer file", path)
	}
	if err != nil {
		return err
	}
	for _, l := range report {
		fmt.Fprintf(e.stdout, "%s: %s\n", path, l)
	}
	return nil
}

// declaredImage is the image a file's header declares when the file is
// longer (the stale tail a killed rewrite leaves, which every reader
// ignores), else the whole file.
func declaredImage(b []byte) []byte {
	if len(b) < hashfile.HeaderSize || binary.BigEndian.Uint32(b) != hashfile.Magic {
		return b
	}
	if size := binary.BigEndian.Uint64(b[8:]); size >= hashfile.HeaderSize && size < uint64(len(b)) {
		return b[:size]
	}
	return b
}

// repairTree salvages raw and makes a transfer file of it that says
// nothing it cannot vouch for (see helpRepair), with the lines that say
// what was done.
func repairTree(raw []byte) (*hashfile.Tree, []string) {
	s := salvage(raw)
	var lines []string
	for _, p := range s.problems {
		lines = append(lines, "problem: "+p)
	}
	for _, d := range s.dropped {
		lines = append(lines, "dropped: "+d)
	}
	t := s.tree
	if len(s.cut) >= 2 && s.cut[0] == transfer.KeyFiles {
		if files := t.Get(transfer.KeyFiles); files != nil && files.Unset(s.cut[1]) {
			lines = append(lines, fmt.Sprintf("dropped: %s/%s: the entry decoding stopped in (the library adds it again at its next flush)", transfer.KeyFiles, s.cut[1]))
		}
	}
	v := transfer.Read(t)
	reset := 0
	for _, f := range v.Files {
		if f.Problem == nil && (f.Written != 0 || f.HasCRC || f.Error != "" || f.Warning != "") {
			transfer.AddFile(t, f.Src, f.Dest, f.Size)
			reset++
		}
	}
	if reset > 0 {
		lines = append(lines, fmt.Sprintf("reset: %s to WRITTEN 0 (the daemon copies them again: the progress a corrupt file records cannot be trusted)",
			count(reset, "FILES entry", "FILES entries")))
	}
	if v.Done {
		transfer.SetDone(t, false)
		lines = append(lines, "reset: FLAG DONE removed")
	}
	if t.Unset(transfer.KeyFlush) {
		lines = append(lines, "reset: the FLUSH record removed")
	}
	lines = append(lines, fmt.Sprintf("kept: %s, %s", count(len(v.Files), "FILES entry", "FILES entries"), keptText(v)))
	return t, lines
}

// keptText says which top-level settings a repaired file keeps.
func keptText(v transfer.View) string {
	state := string(v.State)
	if state == "" {
		state = "(none)"
	}
	return fmt.Sprintf("COMMAND %s, STATE %s, BW %s, PERCENT %s", commandText(v), state, bwText(v.BW), status.PercentText(v.Percent))
}

// keepBackup writes raw to a new file beside path, named after it and the
// time, and syncs it: the corrupt file as it was, for a person to examine.
func keepBackup(path string, raw []byte, now time.Time) (string, error) {
	name := path + ".corrupt-" + now.UTC().Format("20060102T150405Z")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("backup of the corrupt file: %w", err)
	}
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(name))
	}
	if err != nil {
		return "", fmt.Errorf("backup of the corrupt file %s: %w", name, err)
	}
	return name, nil
}

// syncDir makes a new entry of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
