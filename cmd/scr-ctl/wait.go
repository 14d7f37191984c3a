package main

import (
	"fmt"
	"strings"

	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpWait = `
Blocks until one of:
  - the flush is complete: FLAG DONE is set and every file has
    WRITTEN >= SIZE, or no flush is asked for (no COMMAND RUN) and no file
    has bytes left (exit status 0);
  - a file has an ERROR recorded by the daemon, or a FILES entry is malformed
    (exit status 1; the message names each such file and its error);
  - --timeout has passed (exit status 1; the message says so and how far
    the flush got).
The transfer file must exist. It is watched with inotify, and its metadata
polled every --poll for file systems where inotify misses other nodes'
writes.`

func cmdWait(e *env, args []string) error {
	fs := newFlags("wait")
	timeout := fs.Duration("timeout", 0, "give up after this long (0: wait for ever)")
	poll := fs.Duration("poll", defaultPoll, "check the file's metadata this often besides inotify")
	quiet := fs.Bool("quiet", false, "print nothing on success")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "exactly one TRANSFERFILE"); err != nil {
		return err
	}
	if *timeout < 0 || *poll <= 0 {
		return usageError{"--timeout must not be negative and --poll must be positive"}
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(e.ctx, *timeout)
	defer cancel()
	var final transfer.View
	err = watchView(ctx, store, *poll, *timeout, func(v transfer.View) (bool, error) {
		if err := filesInError(store.Path(), v); err != nil {
			return false, err
		}
		final = v
		return !v.HasPending() && (v.Done || v.Command != transfer.Run), nil
	}, func(v transfer.View) string {
		return fmt.Sprintf("the flush of %s is not complete: %s", store.Path(), progressText(v))
	})
	if err != nil {
		return err
	}
	if !*quiet {
		fmt.Fprintf(e.stdout, "%s: flush complete: %s\n", store.Path(), progressText(final))
	}
	return nil
}

// filesInError returns an error naming every file of v with an ERROR or a
// malformed entry, nil if there is none.
func filesInError(path string, v transfer.View) error {
	var msgs []string
	for _, f := range v.Files {
		switch f.State() {
		case transfer.StateError:
			msgs = append(msgs, fmt.Sprintf("%s -> %s: ERROR %s", f.Src, f.Dest, f.Error))
		case transfer.StateInvalid:
			msgs = append(msgs, fmt.Sprintf("%s: malformed FILES entry: %v", f.Src, f.Problem))
		}
	}
	switch len(msgs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: %s", path, msgs[0])
	}
	return fmt.Errorf("%s: %d files in error:\n  %s", path, len(msgs), strings.Join(msgs, "\n  "))
}

// progressText says how far a flush got.
func progressText(v transfer.View) string {
	size, written := v.Totals()
	complete := v.Count()[transfer.StateComplete]
	s := fmt.Sprintf("%d of %d files complete, %d of %d bytes written", complete, len(v.Files), written, size)
	if v.Done {
		s += ", FLAG DONE"
	}
	if v.State != "" {
		s += ", STATE " + string(v.State)
	} else {
		s += ", no STATE recorded"
	}
	return s
}
