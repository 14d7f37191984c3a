package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// Environment of the library process TestContention starts, and the knob
// of the test itself.
const (
	libraryChildEnv = "SCR_TEST_LIBRARY_CHILD" // "contention": run as the library
	libPathEnv      = "SCR_TEST_LIB_PATH"      // transfer file
	libCacheEnv     = "SCR_TEST_LIB_CACHE"     // where the library creates checkpoint files
	libPFSEnv       = "SCR_TEST_LIB_PFS"       // where their destinations go
	libUpdatesEnv   = "SCR_TEST_LIB_UPDATES"   // how many updates to make
	libCapEnv       = "SCR_TEST_LIB_CAP"       // how long they may take at most
	libSeedEnv      = "SCR_TEST_LIB_SEED"      // seed of the library's choices
	libHzEnv        = "SCR_TEST_LIB_HZ"        // most updates per second

	contentionUpdatesEnv = "SCR_CONTENTION_UPDATES" // updates the library makes (default 3000)
	contentionCapEnv     = "SCR_CONTENTION_CAP"     // time they may take at most (default 8m)

	libSeqKey = "LIBSEQ" // counter the library bumps on every update
)

// The child runs before TestMain, so it neither builds the binaries nor
// runs any test.
func init() {
	if os.Getenv(libraryChildEnv) == "contention" {
		os.Exit(runContentionLibrary(os.Stdout, os.Stderr))
	}
}

// libFile is a FILES entry the library added.
type libFile struct {
	Src, Dest string
	Size      int64
}

// libReport is what the library process reports on its standard output.
type libReport struct {
	Updates   int
	Seconds   float64
	MaxUpdate float64 // longest single update, lock wait included, in seconds
	Adds      int
	BWChanges int
	Flips     int
	Files     []libFile
	BW        string // last BW value written
	Command   string // last COMMAND written
	Seq       uint64 // last LIBSEQ written
	Lost      []string
	Backwards []string
	Observed  int // WRITTEN changes the library saw
}

func runContentionLibrary(stdout, stderr io.Writer) int {
	path, cache, pfs := os.Getenv(libPathEnv), os.Getenv(libCacheEnv), os.Getenv(libPFSEnv)
	updates, err1 := strconv.Atoi(os.Getenv(libUpdatesEnv))
	limit, err2 := time.ParseDuration(os.Getenv(libCapEnv))
	seed, err3 := strconv.ParseUint(os.Getenv(libSeedEnv), 10, 64)
	hz, err4 := strconv.Atoi(os.Getenv(libHzEnv))
	if path == "" || cache == "" || pfs == "" || errors.Join(err1, err2, err3, err4) != nil || hz <= 0 || updates <= 0 {
		fmt.Fprintln(stderr, "library child: bad environment", err1, err2, err3, err4)
		return 2
	}
	rep, err := contentionLibrary(path, cache, pfs, updates, limit, seed, hz)
	if err != nil {
		fmt.Fprintln(stderr, "library child:", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		fmt.Fprintln(stderr, "library child:", err)
		return 1
	}
	return 0
}

// contentionLibrary rewrites the transfer file under its lock, updates
// times at no more than hz updates a second, then settles on RUN with no BW
// limit. It stops early, reporting how many it made, once limit has passed:
// a loaded machine makes the run slower, never shorter in work.
func contentionLibrary(path, cache, pfs string, updates int, limit time.Duration, seed uint64, hz int) (*libReport, error) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	store := hashfile.NewStore(path, hashfile.Flock)
	rep := &libReport{}
	maxWritten := map[string]int64{}
	bws := []float64{2e6, 4e6, 8e6} // the flush stays busy through the run
	lastCmd := string(transfer.Run) // the test issues RUN before starting this process
	var lastBW string

	update := func(change func(t *hashfile.Tree)) error {
		began := time.Now()
		_, _, err := store.Update(func(t *hashfile.Tree) error {
			// Everything this process wrote before must still be there.
			seq, _, err := t.Uint(libSeqKey)
			if err != nil {
				return err
			}
			if seq != rep.Seq {
				rep.Lost = append(rep.Lost, fmt.Sprintf("update %d: %s %d, wrote %d", rep.Updates, libSeqKey, seq, rep.Seq))
			}
			if v, _ := t.Value(transfer.KeyBW); lastBW != "" && v != lastBW {
				rep.Lost = append(rep.Lost, fmt.Sprintf("update %d: BW %q, wrote %q", rep.Updates, v, lastBW))
			}
			if v, _ := t.Value(transfer.KeyCommand); lastCmd != "" && v != lastCmd {
				rep.Lost = append(rep.Lost, fmt.Sprintf("update %d: COMMAND %q, wrote %q", rep.Updates, v, lastCmd))
			}
			for _, f := range rep.Files {
				e := t.Lookup(transfer.KeyFiles, f.Src)
				d, _ := e.Value(transfer.KeyDestination)
				s, _, _ := e.Uint(transfer.KeySize)
				if e == nil || d != f.Dest || int64(s) != f.Size {
					rep.Lost = append(rep.Lost, fmt.Sprintf("update %d: entry %s missing or changed", rep.Updates, f.Src))
				}
			}
			// The daemon's progress never goes backwards (no entry is
			// ever replaced in this run).
			for src, e := range t.Get(transfer.KeyFiles).All() {
				w, _, err := e.Uint(transfer.KeyWritten)
				if err != nil {
					return err
				}
				switch prev := maxWritten[src]; {
				case int64(w) < prev:
					rep.Backwards = append(rep.Backwards, fmt.Sprintf("update %d: %s WRITTEN %d after %d", rep.Updates, src, w, prev))
				case int64(w) > prev:
					rep.Observed++
					maxWritten[src] = int64(w)
				}
			}
			t.SetUint(libSeqKey, seq+1)
			change(t)
			return nil
		})
		if err != nil {
			return err
		}
		rep.Seq++
		rep.Updates++
		rep.MaxUpdate = max(rep.MaxUpdate, time.Since(began).Seconds())
		return nil
	}

	tick := time.NewTicker(time.Second / time.Duration(hz))
	defer tick.Stop()
	start := time.Now()
	for rep.Updates < updates && time.Since(start) < limit {
		<-tick.C
		change := func(*hashfile.Tree) {} // only the counter
		after := func() {}                // what the library remembers once written
		switch r := rng.IntN(100); {
		case r < 2: // add a file
			name := fmt.Sprintf("lib-%05d.ckpt", rep.Adds)
			f := libFile{Src: filepath.Join(cache, name), Dest: filepath.Join(pfs, "lib", name), Size: int64(rng.IntN(1 << 20))}
			data := make([]byte, f.Size)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			if err := os.WriteFile(f.Src, data, 0o644); err != nil {
				return nil, err
			}
			change = func(t *hashfile.Tree) { transfer.AddFile(t, f.Src, f.Dest, f.Size) }
			after = func() { rep.Files = append(rep.Files, f); rep.Adds++ }
		case r < 12: // change BW
			bw := bws[rng.IntN(len(bws))]
			change = func(t *hashfile.Tree) { transfer.SetBW(t, bw) }
			after = func() { lastBW = strconv.FormatFloat(bw, 'f', 6, 64); rep.BWChanges++ }
		case r < 13 || r < 17 && lastCmd == string(transfer.Stop):
			// Flip COMMAND; a STOP lasts a fifth as long as a RUN.
			c := transfer.Run
			if lastCmd == string(transfer.Run) {
				c = transfer.Stop
			}
			change = func(t *hashfile.Tree) { transfer.SetCommand(t, c) }
			after = func() { lastCmd = string(c); rep.Flips++ }
		}
		if err := update(change); err != nil {
			return nil, err
		}
		after()
	}
	rep.Seconds = time.Since(start).Seconds()
	// Settle: RUN, no limit, and one last check of everything.
	if err := update(func(t *hashfile.Tree) {
		transfer.SetBW(t, 0)
		transfer.SetCommand(t, transfer.Run)
	}); err != nil {
		return nil, err
	}
	lastBW, lastCmd = strconv.FormatFloat(0, 'f', 6, 64), string(transfer.Run)
	// One more update checks that the settling one stayed in place.
	if err := update(func(*hashfile.Tree) {}); err != nil {
		return nil, err
	}
	rep.BW, rep.Command = lastBW, lastCmd
	return rep, nil
}

// monitor reads the transfer file under a shared lock, as a status tool
// would, and checks every read.
type monitor struct {
	reads     int
	problems  []string
	written   map[string]int64
	sources   map[string][]byte // source bytes, read once the entry appears
	completed map[string]bool
}

func (m *monitor) problem(format string, args ...any) {
	m.problems = append(m.problems, fmt.Sprintf(format, args...))
}

// check reads the file once. Holding the shared lock keeps WRITTEN still
// while the copies are compared with their sources.
func (m *monitor) check(path string) {
	f, err := lockedFile(path, false)
	if err != nil {
		m.problem("open: %v", err)
		return
	}
	defer f.Close()
	img, err := io.ReadAll(f)
	if err != nil {
		m.problem("read: %v", err)
		return
	}
	m.reads++
	tree, err := hashfile.Decode(img)
	if err != nil {
		m.problem("read %d does not decode (torn read): %v", m.reads, err)
		return
	}
	v := transfer.Read(tree)
	for _, fl := range v.Files {
		if fl.Problem != nil {
			m.problem("read %d: %s malformed: %v", m.reads, fl.Src, fl.Problem)
			continue
		}
		if prev, ok := m.written[fl.Src]; ok && fl.Written < prev {
			m.problem("read %d: %s WRITTEN went back from %d to %d", m.reads, fl.Src, prev, fl.Written)
		}
		m.written[fl.Src] = fl.Written
		if fl.Written == 0 || m.completed[fl.Src] {
			continue
		}
		data, ok := m.sources[fl.Src]
		if !ok {
			if data, err = os.ReadFile(fl.Src); err != nil {
				m.problem("read %d: source %s: %v", m.reads, fl.Src, err)
				continue
			}
			m.sources[fl.Src] = data
		}
		match, err := matchingPrefix(fl.Dest, data)
		if err != nil {
			m.problem("read %d: %v", m.reads, err)
			continue
		}
		if fl.Written > match {
			m.problem("read %d: %s WRITTEN %d but only %d bytes of its copy equal the source", m.reads, fl.Src, fl.Written, match)
		}
		if fl.Written == fl.Size && fl.HasCRC {
			m.completed[fl.Src] = true
		}
	}
}

// TestContention re-executes the test binary as a second process that plays
// the SCR library: it makes a fixed number of updates to the transfer file
// under its lock (3000, at most 200 a second; the test asks for that work,
// not for a speed, and gives it a generous time), adding files, changing BW and flipping COMMAND
// between RUN and STOP, while the daemon flushes. Inside every update the
// library checks that all it wrote before is still there and that no
// WRITTEN went backwards; a third party in this process reads the file
// under a shared lock and checks that every read decodes and that WRITTEN
// never exceeds the bytes of the copy that equal the source. Once the
// library settles on RUN the flush must complete, with every destination
// identical to its source.
func TestContention(t *testing.T) {
	testenv.Long(t, "thousands of library updates racing the daemon")
	updates := envInt(t, contentionUpdatesEnv, 3000)
	limit := envDuration(t, contentionCapEnv, 8*time.Minute)
	seed := uint64(time.Now().UnixNano())
	t.Logf("library seed %d, %d updates within %v", seed, updates, limit)
	n := newNode(t)

	// A few large files keep the daemon busy from the start.
	srcs := map[string][]byte{}
	for i := range 4 {
		name := fmt.Sprintf("big-%d.ckpt", i)
		p, data := n.checkpoint(name, 16*mib)
		srcs[p] = data
		n.add(p, n.dest(name))
	}
	n.library(func(t *hashfile.Tree) {
		transfer.SetBW(t, 8e6)
		transfer.SetCommand(t, transfer.Run)
		t.SetUint(libSeqKey, 0)
	})
	d := n.start("--sync-interval=50ms", "--sync-bytes=262144")
	n.waitFor("RUNNING", settle, func(v transfer.View) bool { return v.State == transfer.Running })

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(),
		libraryChildEnv+"=contention",
		libPathEnv+"="+n.transfer,
		libCacheEnv+"="+n.cache,
		libPFSEnv+"="+n.pfs,
		libUpdatesEnv+"="+strconv.Itoa(updates),
		libCapEnv+"="+limit.String(),
		libSeedEnv+"="+strconv.FormatUint(seed, 10),
		libHzEnv+"=200",
	)
	var stdout, stderr bytes.Buffer
	child.Stdout, child.Stderr = &stdout, &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	// Killing a process already waited for does nothing.
	t.Cleanup(func() { _ = child.Process.Kill() })
	childDone := make(chan error, 1)
	go func() { childDone <- child.Wait() }()

	m := &monitor{written: map[string]int64{}, sources: map[string][]byte{}, completed: map[string]bool{}}
	// A pause of 50 ms after each read, not a 50 ms ticker: on a loaded
	// machine a read can take longer than that, and back-to-back reads
	// would hold the shared lock nearly all the time.
	pause := time.NewTimer(50 * time.Millisecond)
	var childErr error
watch:
	for {
		select {
		case childErr = <-childDone:
			break watch
		case <-pause.C:
			m.check(n.transfer)
			pause.Reset(50 * time.Millisecond)
		}
	}
	pause.Stop()
	if childErr != nil {
		t.Fatalf("library process: %v\n%s", childErr, stderr.String())
	}
	var rep libReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("library report %q: %v", stdout.String(), err)
	}
	rate := float64(rep.Updates) / rep.Seconds
	t.Logf("library: %d updates in %.1f s = %.0f/s (longest %.1f ms), %d files added, %d BW changes, %d COMMAND flips, %d WRITTEN advances seen; monitor: %d reads",
		rep.Updates, rep.Seconds, rate, rep.MaxUpdate*1e3, rep.Adds, rep.BWChanges, rep.Flips, rep.Observed, m.reads)
	for _, s := range rep.Lost {
		t.Errorf("library update lost: %s", s)
	}
	for _, s := range rep.Backwards {
		t.Errorf("daemon update lost: %s", s)
	}
	for _, s := range m.problems {
		t.Errorf("monitor: %s", s)
	}
	// The settling updates come on top of the asked-for ones.
	if rep.Updates < updates {
		t.Errorf("the library made %d of its %d updates within %v", rep.Updates, updates, limit)
	}
	if rep.Flips < 2 || rep.Adds < 1 {
		t.Errorf("the library's run did too little: %d flips, %d files added", rep.Flips, rep.Adds)
	}

	// No deadlock: with the library settled on RUN, the flush completes.
	v := n.waitFor("DONE once the library settles on RUN", 6*settle, done)
	for _, f := range rep.Files {
		data, err := os.ReadFile(f.Src)
		must(t, err)
		srcs[f.Src] = data
		g, ok := file(v, f.Src)
		if !ok || g.Dest != f.Dest || g.Size != f.Size {
			t.Errorf("library's entry %s lost or changed: %+v", f.Src, g)
		}
	}
	if len(v.Files) != len(srcs) {
		t.Errorf("%d FILES entries at the end, the library wrote %d", len(v.Files), len(srcs))
	}
	checkFlushed(t, v, srcs)
	tree, err := n.store.Read()
	must(t, err)
	if seq, _, _ := tree.Uint(libSeqKey); seq != rep.Seq {
		t.Errorf("%s %d at the end, the library wrote %d", libSeqKey, seq, rep.Seq)
	}
	if bw, _ := tree.Value(transfer.KeyBW); bw != rep.BW {
		t.Errorf("BW %q at the end, the library wrote %q", bw, rep.BW)
	}
	if c, _ := tree.Value(transfer.KeyCommand); c != rep.Command {
		t.Errorf("COMMAND %q at the end, the library wrote %q", c, rep.Command)
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
	log := d.Log.String()
	t.Logf("daemon: %d copies started, %d stopped by STOP, %d files flushed",
		strings.Count(log, "\tcopy\t"), strings.Count(log, "\tcopy stopped\t"), strings.Count(log, "\tflushed\t"))
	for _, bad := range []string{"cannot use the transfer file", "copy failed", "resume impossible", "copy abandoned", "malformed"} {
		if strings.Contains(log, bad) {
			t.Errorf("daemon log says %q", bad)
		}
	}
}
