package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/transfer"
)

const helpRun = `
Writes COMMAND RUN into the transfer file under the same lock as the SCR
library, and removes FLAG DONE, as the library does when it starts a
flush. The daemon then copies every file not yet complete.
` + helpControlCommon

const helpStop = `
Writes COMMAND STOP into the transfer file under the same lock as the SCR
library: the daemon finishes the commit under way, keeps what it copied,
and stays idle until the next RUN.
` + helpControlCommon

const helpExit = `
Writes COMMAND EXIT into the transfer file under the same lock as the SCR
library: the daemon stops copying, records STATE EXITING and exits. With
--wait the command also waits until the daemon's process has released its
instance lock (where it takes one), so the daemon is gone when it returns.
` + helpControlCommon

const helpControlCommon = `
The transfer file must exist (a mistyped path is an error, not a new
file): --create makes it if it does not.

With --wait the command returns once the daemon has answered: STATE RUNNING
(or FLAG DONE, a flush that is already complete) for run, STATE STOPPED for
stop, STATE EXITING for exit. To be sure the answer comes from a live daemon
and not from a STATE left in the file by an earlier one, --wait also removes
STATE; a running daemon records its state again at once (the protocol asks
it to whenever the key is missing). When no daemon serves the file for
--grace (none holds its instance lock, or, without a lock file, no STATE
is recorded again), --wait fails at once with exit status 1 and says so;
see scr-ctl wait --help.`

const helpAdd = `
Adds (or resets) FILES/SRC with DESTINATION DEST, SIZE and WRITTEN 0, as the
SCR library does when it starts an asynchronous flush. SRC and DEST are made
absolute. SIZE is the size of SRC unless --size is given. This does not ask
the daemon to copy: run does.`

const helpSet = `
bw VALUE      BW, the average copy rate in bytes per second: a number with an
              optional unit K, M, G, T or P. Units are powers of 1024, as in
              SCR's parameters, and KB/KiB, MB/MiB... are synonyms: 100M,
              100MB and 100MiB are all 104857600 bytes/s. A number without
              a unit is bytes per second (1e8 is 10^8). 0 removes the limit.
              A value without a unit below 1 MiB/s, or any value below
              1 KiB/s, is set with a warning: it is probably a mistake.
percent VALUE PERCENT, the share of time the daemon may spend copying, 0 to
              100; 0 removes the limit.
Values are written in C's "%f" form, as the library writes them. The daemon
applies a change at once. Negative values are refused.`

// controlCmd returns the run, stop or exit command.
func controlCmd(name string) func(*env, []string) error {
	return func(e *env, args []string) error {
		fs := newFlags(name)
		wait := fs.Bool("wait", false, "wait until the daemon has answered (see above)")
		timeout := fs.Duration("timeout", 0, "with --wait, give up after this long (0: wait for ever)")
		grace := fs.Duration("grace", defaultGrace, "with --wait, fail when no daemon has served the file for this long")
		create := fs.Bool("create", false, "create the transfer file if it does not exist")
		poll := fs.Duration("poll", defaultPoll, "with --wait, check the file's metadata this often besides inotify")
		locking := lockingFlag(fs)
		pos, err := parseFlags(e, fs, args)
		if err != nil {
			return err
		}
		if err := wantArgs(pos, 1, "exactly one TRANSFERFILE"); err != nil {
			return err
		}
		if err := checkDurations(*timeout, *grace, *poll); err != nil {
			return err
		}
		if *timeout > 0 && !*wait {
			return usageError{"--timeout only applies with --wait"}
		}
		store, err := openStore(pos[0], *locking)
		if err != nil {
			return err
		}
		if !*create {
			// The library's lock file may exist without the transfer
			// file; only the transfer file itself says it is in use.
			if _, err := os.Stat(store.Path()); errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s: no such transfer file (check the path; --create makes a new one)", store.Path())
			} else if err != nil {
				return err
			}
		}
		cmd := map[string]transfer.Command{"run": transfer.Run, "stop": transfer.Stop, "exit": transfer.Exit}[name]
		if _, _, err := store.Update(func(t *hashfile.Tree) error {
			transfer.SetCommand(t, cmd)
			if *wait {
				t.Unset(transfer.KeyState)
			}
			return nil
		}); err != nil {
			return err
		}
		if !*wait {
			return nil
		}
		want := map[transfer.Command]transfer.State{transfer.Run: transfer.Running, transfer.Stop: transfer.Stopped, transfer.Exit: transfer.Exiting}[cmd]
		ctx, cancel := withTimeout(e.ctx, *timeout)
		defer cancel()
		var reached string
		live := &liveCheck{path: store.Path(), grace: *grace, now: e.now}
		err = watchViewEvery(ctx, store, *poll, *timeout, recheck(*grace), func(v transfer.View) (bool, error) {
			switch {
			case v.Command != cmd:
				return false, fmt.Errorf("%s: COMMAND is now %s: another writer changed it while waiting for STATE %s",
					store.Path(), commandText(v), want)
			case cmd == transfer.Exit && v.State == want:
				// Answered; now wait for the process to let go of its lock.
				_, held, err := instance.Holder(store.Path())
				if err != nil {
					return false, err
				}
				reached = "STATE EXITING, and the daemon has exited"
				return !held, nil
			case v.State == want:
				reached = "STATE " + string(want)
				return true, nil
			case cmd == transfer.Run && v.Done:
				reached = "FLAG DONE (the flush is complete)"
				return true, nil
			}
			if err := live.check(v); err != nil {
				return false, fmt.Errorf("%w (STATE %s not recorded: %s)", err, want, stateText(v))
			}
			return false, nil
		}, func(v transfer.View) string {
			return fmt.Sprintf("the daemon has not recorded STATE %s in %s (%s)", want, store.Path(), stateText(v))
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", store.Path(), reached)
		return nil
	}
}

func commandText(v transfer.View) string {
	switch {
	case v.Unknown != "":
		return v.Unknown
	case v.Command == transfer.None:
		return "missing"
	}
	return string(v.Command)
}

// stateText says what STATE a reading holds, for error messages.
func stateText(v transfer.View) string {
	if v.State == "" {
		return "no STATE: no daemon has answered; is scr-transferd running on this file?"
	}
	return "STATE is " + string(v.State)
}

func cmdAdd(e *env, args []string) error {
	fs := newFlags("add")
	size := fs.String("size", "", "SIZE to record instead of the size of SRC (bytes, or with a unit: "+units.Convention+")")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 3, "TRANSFERFILE SRC DEST"); err != nil {
		return err
	}
	src, err := filepath.Abs(pos[1])
	if err != nil {
		return fmt.Errorf("%s: %w", pos[1], err)
	}
	dest, err := filepath.Abs(pos[2])
	if err != nil {
		return fmt.Errorf("%s: %w", pos[2], err)
	}
	var n int64
	if *size != "" {
		v, err := units.ParseCount(*size, 0, math.MaxInt64)
		if err != nil {
			return usageError{"--size " + err.Error()}
		}
		n = v
	} else {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("source %w (give --size to add a file that does not exist yet)", err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("source %s: not a regular file (%s)", src, fi.Mode().Type())
		}
		n = fi.Size()
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	_, _, err = store.Update(func(t *hashfile.Tree) error {
		transfer.AddFile(t, src, dest, n)
		return nil
	})
	return err
}

func cmdSet(e *env, args []string) error {
	fs := newFlags("set")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 3, "TRANSFERFILE bw|percent VALUE"); err != nil {
		return err
	}
	if err := setArgsOrder(pos); err != nil {
		return err
	}
	var edit func(*hashfile.Tree)
	switch key := strings.ToLower(pos[1]); key {
	case "bw":
		v, err := units.Parse(pos[2])
		if err != nil {
			return usageError{"bw: " + err.Error()}
		}
		// The daemon's own reading of the value decides what it accepts:
		// a BW below 1 B/s would be raised to 1 B/s, which nobody means.
		if l := transfer.ReadLimits(strconv.FormatFloat(v, 'f', -1, 64), ""); len(l.Problems) > 0 {
			return usageError{fmt.Sprintf("bw %s: %s B/s is below 1 B/s, the smallest limit; 0 means no limit, and 0.5M means 0.5 MiB/s",
				pos[2], strconv.FormatFloat(v, 'g', -1, 64))}
		}
		if w := units.RateWarning(pos[2], v); w != "" {
			fmt.Fprintf(e.stderr, "scr-ctl set: warning: bw %s\n", w)
		}
		edit = func(t *hashfile.Tree) { transfer.SetBW(t, v) }
	case "percent":
		raw := strings.TrimSuffix(strings.TrimSpace(pos[2]), "%")
		l := transfer.ReadLimits("", raw)
		v := l.Percent
		if raw == "" || len(l.Problems) > 0 {
			return usageError{fmt.Sprintf("percent: %q is not a number from 0 to 100", pos[2])}
		}
		edit = func(t *hashfile.Tree) { transfer.SetPercent(t, v) }
	default:
		return usageError{fmt.Sprintf("unknown setting %q: want bw or percent (scr-ctl set TRANSFERFILE bw|percent VALUE)", pos[1])}
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	_, _, err = store.Update(func(t *hashfile.Tree) error {
		edit(t)
		return nil
	})
	return err
}

// setArgsOrder catches set's arguments in the wrong order (the setting
// first, or the value before the setting) and says how to write them.
func setArgsOrder(pos []string) error {
	isKey := func(s string) bool { k := strings.ToLower(s); return k == "bw" || k == "percent" }
	switch {
	case isKey(pos[1]):
		return nil
	case isKey(pos[0]):
		return usageError{fmt.Sprintf("the transfer file comes first: scr-ctl set %s %s %s", pos[1], pos[0], pos[2])}
	case isKey(pos[2]):
		return usageError{fmt.Sprintf("the setting comes before its value: scr-ctl set %s %s %s", pos[0], pos[2], pos[1])}
	}
	return nil
}
