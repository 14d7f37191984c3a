package main

// Two daemons side by side: with -baseline REV (or -baseline-bin PATH) each
// section that starts a daemon runs once per binary and round, old then new,
// and its figures are compared goal by goal: the new daemon's figure is to be
// within 10 % of the old one's, measured in the same run, or better.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// daemonBin is one scr-transferd binary the benchmark starts.
type daemonBin struct {
	name  string          // as the tables show it
	path  string          // the executable
	flags map[string]bool // the flags its --help lists, without dashes
}

// errUnknownFlag: a section asked for a flag the binary does not have (an
// older daemon may not know a newer flag), so the section cannot measure it.
var errUnknownFlag = errors.New("flag unknown to this daemon")

// helpFlagRE matches a flag's line in --help: "  --name" as the daemon
// prints its flags, or "  -name" as Go's flag package did before.
var helpFlagRE = regexp.MustCompile(`(?m)^  --?([a-z][a-z0-9-]*)`)

// helpFlags returns the flags a daemon's --help text lists.
func helpFlags(help string) map[string]bool {
	flags := map[string]bool{}
	for _, m := range helpFlagRE.FindAllStringSubmatch(help, -1) {
		flags[m[1]] = true
	}
	return flags
}

// check returns an error wrapping errUnknownFlag, naming the binary and the
// flag, unless the binary lists every flag of args ("--name", "--name=value"
// or "-name"; other arguments are values and are not checked).
func (d daemonBin) check(args []string) error {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !d.flags[name] {
			return fmt.Errorf("%s (%s) has no --%s: %w", d.name, d.path, name, errUnknownFlag)
		}
	}
	return nil
}

// probeDaemon reads the flags of the daemon at path from its --help.
func probeDaemon(name, path string) (daemonBin, error) {
	out, err := exec.Command(path, "--help").CombinedOutput()
	flags := helpFlags(string(out))
	if len(flags) == 0 {
		return daemonBin{}, fmt.Errorf("%s --help lists no flags (%v): %s", path, err, out)
	}
	return daemonBin{name: name, path: path, flags: flags}, nil
}

// buildDaemon builds cmd/scr-transferd of the module in src into dir.
func buildDaemon(src, dir, file string) (string, error) {
	out := filepath.Join(dir, file)
	build := exec.Command("go", "build", "-o", out, "./cmd/scr-transferd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building scr-transferd in %s: %w", src, err)
	}
	return out, nil
}

// buildAt builds scr-transferd as of git revision rev of the repository
// at root, from an export of that revision into work (removed with work).
func buildAt(root, rev, work string) (daemonBin, error) {
	short, err := gitOut(root, "rev-parse", "--short", rev+"^{commit}")
	if err != nil {
		return daemonBin{}, fmt.Errorf("-baseline %s: %w", rev, err)
	}
	src := filepath.Join(work, "baseline-"+short)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return daemonBin{}, err
	}
	tar := filepath.Join(work, "baseline.tar")
	if _, err := gitOut(root, "archive", "--format=tar", "-o", tar, short); err != nil {
		return daemonBin{}, fmt.Errorf("-baseline %s: %w", rev, err)
	}
	if out, err := exec.Command("tar", "-xf", tar, "-C", src).CombinedOutput(); err != nil {
		return daemonBin{}, fmt.Errorf("extracting %s: %v: %s", tar, err, out)
	}
	_ = os.Remove(tar)
	path, err := buildDaemon(src, work, "scr-transferd-"+short)
	if err != nil {
		return daemonBin{}, err
	}
	_ = os.RemoveAll(src)
	return probeDaemon("old ("+short+")", path)
}

// gitOut runs git in dir and returns its trimmed standard output.
func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// sense says which way a figure is better.
type sense int

const (
	higher sense = iota // more is better (files/s, a speed against cp)
	lower               // less is better (time, memory, CPU, slowdown)
	near                // closer to target is better (a limit kept)
)

// figure is one value a section measured for one goal.
type figure struct {
	goal   string // the same text for the same goal in every pass
	unit   string
	value  float64
	sense  sense
	target float64 // what the value should be, for sense near
	// resolution is the smallest difference the measurement can tell
	// apart (a clock tick of CPU time, the poll interval of a latency):
	// two values closer than this are the same measurement.
	resolution float64
}

// tolerance is how far the new figure may be from the old one (as a share of
// the old one) and still hold: "within 10 % of the old daemon's, or better".
const tolerance = 0.10

// row is one goal compared: the median of each daemon's figures over the
// rounds, new/old, and whether the new one held.
type row struct {
	goal, unit string
	old, new   float64
	ratio      float64 // new/old; NaN when old is 0
	outcome    outcome
	resolution float64
}

// outcome is a goal's verdict.
type outcome int

const (
	held       outcome = iota // within 10 % of the old figure, or better
	worse                     // more than 10 % worse
	unresolved                // worse, but by less than the measurement resolves
)

// verdict compares a new figure with the old one: held when within 10 %
// of it or better than it; otherwise unresolved when the two are closer
// than the measurement's resolution, else worse.
func verdict(f figure, old, new float64) outcome {
	better := false
	switch f.sense {
	case higher:
		better = new > old
	case lower:
		better = new < old
	default:
		better = math.Abs(new-f.target) < math.Abs(old-f.target)
	}
	switch {
	case better || math.Abs(new-old) <= tolerance*math.Abs(old):
		return held
	case math.Abs(new-old) <= f.resolution:
		return unresolved
	}
	return worse
}

// compareFigures pairs the old and new daemons' figures by goal, in the
// order the goals were first measured; each side's value is the median
// over its rounds. A goal only one side measured is left out and named in
// missing.
func compareFigures(old, new []figure) (rows []row, missing []string) {
	olds, news := byGoal(old), byGoal(new)
	var order []string
	seen := map[string]bool{}
	for _, f := range append(append([]figure(nil), old...), new...) {
		if !seen[f.goal] {
			seen[f.goal] = true
			order = append(order, f.goal)
		}
	}
	for _, g := range order {
		o, n := olds[g], news[g]
		if len(o) == 0 || len(n) == 0 {
			missing = append(missing, g)
			continue
		}
		f := o[0]
		ov, nv := median(values(o)), median(values(n))
		ratio := math.NaN()
		if ov != 0 {
			ratio = nv / ov
		}
		rows = append(rows, row{goal: g, unit: f.unit, old: ov, new: nv, ratio: ratio, outcome: verdict(f, ov, nv), resolution: f.resolution})
	}
	return rows, missing
}

func byGoal(fs []figure) map[string][]figure {
	m := map[string][]figure{}
	for _, f := range fs {
		m[f.goal] = append(m[f.goal], f)
	}
	return m
}

func values(fs []figure) []float64 {
	v := make([]float64, len(fs))
	for i, f := range fs {
		v[i] = f.value
	}
	return v
}

// printRows writes rows as the comparison table.
func printRows(w io.Writer, oldName, newName string, rows []row) {
	fmt.Fprintf(w, "| goal | %s | %s | new/old | within 10 %% or better |\n", oldName, newName)
	fmt.Fprintln(w, "|---|---:|---:|---:|---|")
	for _, r := range rows {
		ok := "yes"
		switch r.outcome {
		case worse:
			ok = "no"
		case unresolved:
			ok = "not resolved: apart by less than the resolution, " + num(r.resolution, r.unit)
		}
		ratio := "–"
		if !math.IsNaN(r.ratio) {
			ratio = fmt.Sprintf("%.3f", r.ratio)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.goal, num(r.old, r.unit), num(r.new, r.unit), ratio, ok)
	}
}

// num formats a figure with its unit and three significant digits or more.
func num(v float64, unit string) string {
	s := fmt.Sprintf("%.3g", v)
	if math.Abs(v) >= 1000 {
		s = fmt.Sprintf("%.0f", v)
	}
	if unit == "×" || unit == "%" {
		return s + unit
	}
	return s + " " + unit
}

// comparison is the state of a run with a baseline: both binaries and what
// every section measured with each.
type comparison struct {
	old, new daemonBin
	rounds   int
	figs     [2][]figure // old's and new's, every section and round
}

// record keeps a figure a section measured with the current daemon.
func (b *bench) record(f figure) { b.figs = append(b.figs, f) }

// runSection runs one section: once without a baseline; with one, old then
// new for each round, when the section starts a daemon (a section that
// does not, such as the Go benchmarks of this tree's packages, runs once).
func (b *bench) runSection(name string, fn func() error) error {
	if b.cmp == nil {
		return fn()
	}
	c := b.cmp
	var sec [2][]figure
	for r := range c.rounds {
		for k, d := range []daemonBin{c.old, c.new} {
			b.exe, b.figs, b.starts = d, nil, 0
			fmt.Printf("### %s, round %d of %d: %s (%s)\n\n", name, r+1, c.rounds, d.name, d.path)
			err := fn()
			b.stopDaemon()
			if errors.Is(err, errUnknownFlag) {
				fmt.Printf("### %s: not compared: %v; measured once, with %s\n\n", name, err, c.new.name)
				b.exe = c.new
				return fn()
			}
			if err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
			if b.starts == 0 { // measures neither daemon: once is enough
				fmt.Printf("### %s: started no daemon of the comparison, so it ran once\n\n", name)
				return nil
			}
			sec[k] = append(sec[k], b.figs...)
		}
	}
	c.figs[0], c.figs[1] = append(c.figs[0], sec[0]...), append(c.figs[1], sec[1]...)
	rows, missing := compareFigures(sec[0], sec[1])
	if len(rows) > 0 {
		fmt.Printf("### %s: %s vs %s (median over %d rounds)\n\n", name, c.old.name, c.new.name, c.rounds)
		printRows(os.Stdout, c.old.name, c.new.name, rows)
	}
	printMissing(missing)
	return nil
}

// summary prints every goal compared, once all sections ran.
func (b *bench) summary(start time.Time) {
	if b.cmp == nil {
		return
	}
	c := b.cmp
	rows, missing := compareFigures(c.figs[0], c.figs[1])
	fmt.Printf("## Old and new daemon side by side: %s vs %s, %d rounds interleaved (old, new, old, new …), %.0f min in all\n\n",
		c.old.name, c.new.name, c.rounds, time.Since(start).Minutes())
	printRows(os.Stdout, c.old.name, c.new.name, rows)
	printMissing(missing)
	var n [3]int
	for _, r := range rows {
		n[r.outcome]++
	}
	fmt.Printf("%d of %d goals within 10 %% of the old daemon's figure or better; %d worse; %d not resolved by this run's measurement.\n\n",
		n[held], len(rows), n[worse], n[unresolved])
}

func printMissing(goals []string) {
	fmt.Println()
	if len(goals) > 0 {
		fmt.Printf("Measured for one daemon only: %s.\n\n", strings.Join(goals, "; "))
	}
}

// baselineFlags defines the flags that name the old daemon.
func (c *config) baselineFlags() {
	flag.StringVar(&c.baseline, "baseline", "", "git revision of an older scr-transferd to measure beside this tree's, section by section")
	flag.StringVar(&c.baselineBin, "baseline-bin", "", "an older scr-transferd binary to measure beside this tree's (instead of -baseline)")
	flag.IntVar(&c.baselineRounds, "baseline-rounds", 2, "with a baseline: rounds of old then new for each section (the median is compared)")
}

// daemons builds this tree's daemon, and with a baseline gets the old one
// (built at the revision, or the binary given), into b.work.
func (b *bench) daemons(root string) error {
	path, err := buildDaemon(root, b.bin, "scr-transferd")
	if err != nil {
		return err
	}
	name := "new"
	if rev, err := gitOut(root, "describe", "--always", "--dirty"); err == nil {
		name = "new (" + rev + ")"
	}
	if b.exe, err = probeDaemon(name, path); err != nil {
		return err
	}
	var old daemonBin
	switch {
	case b.c.baseline != "" && b.c.baselineBin != "":
		return errors.New("-baseline and -baseline-bin: give one")
	case b.c.baseline != "":
		old, err = buildAt(root, b.c.baseline, b.work)
	case b.c.baselineBin != "":
		old, err = probeDaemon("old ("+filepath.Base(b.c.baselineBin)+")", b.c.baselineBin)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	if b.c.baselineRounds < 1 {
		return fmt.Errorf("-baseline-rounds %d: at least 1", b.c.baselineRounds)
	}
	b.cmp = &comparison{old: old, new: b.exe, rounds: b.c.baselineRounds}
	return nil
}

// cpuTick is the kernel's accounting unit of a process's CPU time (USER_HZ
// 100), which cpuTime reads.
const cpuTick = 10 * time.Millisecond

// tickShare is the resolution, in percent of wall, of a CPU share measured
// over wall from two readings of cpuTime: a tick at each end.
func tickShare(wall time.Duration) float64 {
	return 100 * (2 * cpuTick).Seconds() / wall.Seconds()
}
