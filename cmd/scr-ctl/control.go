package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/instance"
	"github.com/scr-transferd/scr-transferd/internal/units"
	"github.com/scr-transferd/scr-transferd/status"
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
Without --wait the command returns at once, with a warning on stderr (exit
status 0) when no daemon serves the file: the command is recorded, and a
daemon started on the file later acts on it.

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
SCR library does when it starts an asynchronous flush, for every SRC DEST
pair given, in one locked update of the transfer file. SRC and DEST are
made absolute. SIZE is the size of SRC unless --size is given (for every
file). This does not ask the daemon to copy: run does.

With --stdin the files come from standard input instead, a manifest of
one file a line:
  SRC DEST [SIZE]
Fields are separated by a tab when the line has one (paths may then hold
spaces, but not at their ends), by spaces otherwise. SIZE, optional, is in bytes or with a unit
(as --size); without it, the size of SRC. Empty lines and lines starting
with # are skipped. For example, every checkpoint of a directory:
  for f in /dev/shm/ckpt/*; do echo "$f /p/scratch/ckpt/${f##*/}"; done |
    scr-ctl add --stdin /dev/shm/transfer.scrinfo

Every line is checked before anything is written: a malformed line, a
SRC listed twice, or a SRC that is not a regular file (without SIZE or
--size) is an error naming the line, and the transfer file is left as it
was.`

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
		written, _, err := store.Update(func(t *hashfile.Tree) error {
			transfer.SetCommand(t, cmd)
			if *wait {
				t.Unset(transfer.KeyState)
			}
			return nil
		})
		if err != nil {
			return explainCorrupt(err, store.Path())
		}
		if !*wait {
			warnUnserved(e, name, store.Path(), transfer.Read(written))
			return nil
		}
		return awaitAnswer(e, store, cmd, waitOpts{timeout: *timeout, grace: *grace, poll: *poll})
	}
}

// waitOpts are the flags of a command that waits for the daemon.
type waitOpts struct {
	timeout, grace, poll time.Duration
}

// awaitAnswer waits until the daemon has answered cmd in the transfer
// file (see helpControlCommon) and says what it found.
func awaitAnswer(e *env, store *hashfile.Store, cmd transfer.Command, o waitOpts) error {
	want := map[transfer.Command]transfer.State{transfer.Run: transfer.Running, transfer.Stop: transfer.Stopped, transfer.Exit: transfer.Exiting}[cmd]
	ctx, cancel := withTimeout(e.ctx, o.timeout)
	defer cancel()
	var reached string
	live := &liveCheck{path: store.Path(), grace: o.grace, now: e.now}
	err := watchViewEvery(ctx, store, o.poll, o.timeout, recheck(o.grace), func(v transfer.View) (bool, error) {
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

// warnUnserved writes a warning to stderr when no daemon serves
// transferFile (status.Probe on v, its reading as written), after a
// command was recorded in it: the
// command stays recorded for a daemon started later, but nothing acts on
// it now, which a job script would otherwise not learn.
func warnUnserved(e *env, name, transferFile string, v transfer.View) {
	lv, err := status.Probe(transferFile, v)
	if err != nil || lv.Serving {
		return
	}
	fmt.Fprintf(e.stderr, "scr-ctl %s: warning: no daemon serves %s, the command waits for one started on it: %s\n",
		name, transferFile, lv.Reason)
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
	size := fs.String("size", "", "SIZE to record for every file instead of the size of its SRC (bytes, or with a unit: "+units.Convention+")")
	stdin := fs.Bool("stdin", false, "read the files to add from standard input, one \"SRC DEST [SIZE]\" a line (see above)")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	var n int64 = -1 // -1: the size of each SRC
	if *size != "" {
		if n, err = parseSize(*size); err != nil {
			return usageError{"--size " + err.Error()}
		}
	}
	var adds []addition
	switch {
	case *stdin && len(pos) == 1:
		if adds, err = readManifest(e.stdin, n); err != nil {
			return fmt.Errorf("standard input: %w", err)
		}
	case *stdin:
		return usageError{fmt.Sprintf("with --stdin, want only TRANSFERFILE, got %d argument(s)", len(pos))}
	case len(pos) < 3 || len(pos)%2 == 0:
		return usageError{fmt.Sprintf("want TRANSFERFILE SRC DEST [SRC DEST]..., got %d argument(s)", len(pos))}
	default:
		for i := 1; i < len(pos); i += 2 {
			adds = append(adds, addition{src: pos[i], dest: pos[i+1], size: n, where: fmt.Sprintf("argument %d", i+1)})
		}
	}
	if err := resolveAdditions(adds); err != nil {
		return err
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	_, _, err = store.Update(func(t *hashfile.Tree) error {
		for _, a := range adds {
			transfer.AddFile(t, a.src, a.dest, a.size)
		}
		return nil
	})
	return explainCorrupt(err, store.Path())
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
	return explainCorrupt(err, store.Path())
}

// addition is one file for add: SRC, DEST, its SIZE (-1: the size of SRC)
// and where it was given, for messages.
type addition struct {
	src, dest string
	size      int64
	where     string
}

// parseSize reads a SIZE: bytes, or a number with a unit, a whole
// number of bytes (units.ParseCount, as every size flag).
func parseSize(s string) (int64, error) {
	return units.ParseCount(s, 0, math.MaxInt64)
}

// readManifest reads add's manifest from r: "SRC DEST [SIZE]" a line, tab-
// separated when the line has a tab, space-separated otherwise; empty
// lines and "#" comments skipped. size (>= 0) is the SIZE of lines without
// one. A nil r reads as empty.
func readManifest(r io.Reader, size int64) ([]addition, error) {
	if r == nil {
		return nil, errors.New("no files: the manifest is empty")
	}
	var adds []addition
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		a, ok, err := manifestLine(sc.Text(), size)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if ok {
			a.where = fmt.Sprintf("standard input line %d", line)
			adds = append(adds, a)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(adds) == 0 {
		return nil, errors.New("no files: the manifest is empty")
	}
	return adds, nil
}

// manifestLine parses one line of add's manifest; ok is false for an empty
// line or a comment.
func manifestLine(text string, size int64) (a addition, ok bool, err error) {
	if t := strings.TrimSpace(text); t == "" || strings.HasPrefix(t, "#") {
		return addition{}, false, nil
	}
	if i := strings.IndexAny(text, "\n\x00"); i >= 0 {
		return addition{}, false, fmt.Errorf("a line end or NUL at byte %d of %q: no path holds one", i, text)
	}
	var fields []string
	if strings.Contains(text, "\t") {
		for _, f := range strings.Split(text, "\t") {
			if f = strings.TrimSpace(f); f != "" {
				fields = append(fields, f)
			}
		}
	} else {
		fields = strings.Fields(text)
	}
	if len(fields) < 2 || len(fields) > 3 {
		return addition{}, false, fmt.Errorf("want SRC DEST [SIZE], got %d fields in %q", len(fields), text)
	}
	a = addition{src: fields[0], dest: fields[1], size: size}
	if len(fields) == 3 {
		if a.size, err = parseSize(fields[2]); err != nil {
			return addition{}, false, fmt.Errorf("SIZE %w", err)
		}
	}
	return a, true, nil
}

// resolveAdditions makes every SRC and DEST absolute and fills in the
// sizes left to the source (-1), refusing a SRC listed twice and a source
// that is not a regular file.
func resolveAdditions(adds []addition) error {
	seen := make(map[string]string, len(adds))
	for i := range adds {
		a := &adds[i]
		src, err := filepath.Abs(a.src)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", a.where, a.src, err)
		}
		dest, err := filepath.Abs(a.dest)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", a.where, a.dest, err)
		}
		if prev, ok := seen[src]; ok {
			return fmt.Errorf("%s: SRC %s is listed twice (first at %s): a FILES entry has one DESTINATION", a.where, src, prev)
		}
		seen[src] = a.where
		a.src, a.dest = src, dest
		if a.size >= 0 {
			continue
		}
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("%s: source %w (give a SIZE, or --size, to add a file that does not exist yet)", a.where, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: source %s: not a regular file (%s)", a.where, src, fi.Mode().Type())
		}
		a.size = fi.Size()
	}
	return nil
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
