package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// A KVTree-like client: a separate process that, under the umask it is
// given, creates the control directory (0777 &^ umask) and the transfer
// file (0666 &^ umask) the way the SCR library does, adds FILES entries and
// asks for the flush.
const (
	kvtreeClientEnv = "SCR_TEST_KVTREE_CLIENT" // the transfer file
	kvtreeUmaskEnv  = "SCR_TEST_KVTREE_UMASK"  // octal
	kvtreeFilesEnv  = "SCR_TEST_KVTREE_FILES"  // src|dest|size, newline-separated
)

func init() {
	if path := os.Getenv(kvtreeClientEnv); path != "" {
		if err := kvtreeClient(path); err != nil {
			fmt.Fprintln(os.Stderr, "kvtree client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

func kvtreeClient(path string) error {
	mask, err := strconv.ParseUint(os.Getenv(kvtreeUmaskEnv), 8, 32)
	if err != nil {
		return err
	}
	unix.Umask(int(mask))
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return err
	}
	_, _, err = hashfile.NewStore(path, hashfile.Flock).Update(func(tr *hashfile.Tree) error {
		for _, line := range strings.Split(os.Getenv(kvtreeFilesEnv), "\n") {
			f := strings.Split(line, "|")
			if len(f) != 3 {
				return fmt.Errorf("bad file line %q", line)
			}
			size, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return err
			}
			transfer.AddFile(tr, f[0], f[1], size)
		}
		transfer.SetCommand(tr, transfer.Run)
		return nil
	})
	return err
}

// runKVTreeClient runs the client process under umask mask.
func runKVTreeClient(t *testing.T, path string, mask int, files map[string]string, srcs map[string][]byte) {
	t.Helper()
	var lines []string
	for src, dest := range files {
		lines = append(lines, fmt.Sprintf("%s|%s|%d", src, dest, len(srcs[src])))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), kvtreeClientEnv+"="+path,
		kvtreeUmaskEnv+"="+strconv.FormatInt(int64(mask), 8), kvtreeFilesEnv+"="+strings.Join(lines, "\n"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kvtree client: %v: %s", err, out)
	}
}

// startUmask starts the daemon under umask mask.
func (n *node) startUmask(mask int, flags ...string) *testenv.Process {
	n.t.Helper()
	args := []string{"-c", fmt.Sprintf(`umask %03o && exec "$0" "$@"`, mask), bins.Path(n.t, testenv.Daemon),
		"--retry-min=100ms", "--retry-max=500ms"}
	args = append(append(args, flags...), n.transfer)
	return testenv.Start(n.t, exec.Command("/bin/sh", args...))
}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	return fi.Mode().Perm()
}

// TestUmaskMatrix: under umask 022, 002 and 077, whether the library or the
// daemon creates the control directory and the transfer file, the daemon
// accepts them and flushes; under --strict-modes it refuses the library's
// group-writable ones but still accepts the files it creates itself.
func TestUmaskMatrix(t *testing.T) {
	testenv.Long(t, "a daemon per umask and creator")
	for _, mask := range []int{0o022, 0o002, 0o077} {
		for _, first := range []string{"library", "daemon"} {
			for _, strict := range []bool{false, true} {
				name := fmt.Sprintf("umask %03o, %s first", mask, first)
				if strict {
					name += ", strict"
				}
				t.Run(name, func(t *testing.T) {
					umaskCase(t, mask, first == "library", strict)
				})
			}
		}
	}
}

func umaskCase(t *testing.T, mask int, libraryFirst, strict bool) {
	n := newNode(t)
	n.transfer = filepath.Join(n.root, "shm", "ctl", "transfer.scrinfo")
	n.store = hashfile.NewStore(n.transfer, hashfile.Flock)
	srcs, files := map[string][]byte{}, map[string]string{}
	for i := range 2 {
		name := fmt.Sprintf("m%d.ckpt", i)
		p, data := n.checkpoint(name, 5000)
		srcs[p], files[p] = data, n.dest(name)
	}
	var flags []string
	if strict {
		flags = append(flags, "--strict-modes")
	}
	var d *testenv.Process
	if libraryFirst {
		runKVTreeClient(t, n.transfer, mask, files, srcs)
		if want := os.FileMode(0o666 &^ mask); perm(t, n.transfer) != want {
			t.Fatalf("the client made a %v transfer file, want %v", perm(t, n.transfer), want)
		}
		d = n.startUmask(mask, flags...)
		if strict && mask&0o020 == 0 {
			// The library's group-writable files are refused, with a reason.
			if code := d.Wait(settle); code == 0 {
				t.Fatal("--strict-modes accepted a group-writable transfer file")
			}
			if !strings.Contains(d.Log.String(), "under --strict-modes") {
				t.Fatalf("the refusal does not name --strict-modes:\n%s", d.Log.String())
			}
			return
		}
	} else {
		d = n.startUmask(mask, append(flags, "--create-dir")...)
		n.waitFor("STATE recorded in the file the daemon created", settle, func(v transfer.View) bool {
			return v.State == transfer.Stopped
		})
		t.Logf("daemon-created: directory %v, transfer file %v", perm(t, filepath.Dir(n.transfer)), perm(t, n.transfer))
		runKVTreeClient(t, n.transfer, mask, files, srcs)
	}
	v := n.waitFor("DONE", settle, done)
	checkFlushed(t, v, srcs)
	groupWritable := perm(t, n.transfer)&0o020 != 0 || perm(t, filepath.Dir(n.transfer))&0o020 != 0
	if logged := strings.Contains(d.Log.String(), "trusting a group-writable"); logged != groupWritable {
		t.Errorf("group-writable files %v, but the start logged the group: %v", groupWritable, logged)
	}
	if !d.Alive() {
		t.Fatal("the daemon exited")
	}
}
