package test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// gluster is the GlusterFS volume test/gluster/up.sh brings up, found
// through SCR_GLUSTER: two client mounts (two nodes) and the brick's file
// system.
type gluster struct {
	nodes   [2]string // the client mounts
	brickfs string    // the loop-mounted file system holding the brick
	volume  string
}

// glusterFS returns the volume, failing under CI=true when SCR_GLUSTER is
// not set and skipping otherwise. Each test works in a fresh directory of
// the volume, removed at its end.
func glusterFS(t *testing.T) (g gluster, dir string) {
	t.Helper()
	root := os.Getenv("SCR_GLUSTER")
	if root == "" {
		testenv.Absent(t, "SCR_GLUSTER is not set: bring GlusterFS up with test/gluster/up.sh and export its output as SCR_GLUSTER")
	}
	vol, err := os.ReadFile(filepath.Join(root, "volume"))
	if err != nil {
		t.Fatalf("SCR_GLUSTER=%s: %v (run test/gluster/up.sh)", root, err)
	}
	g = gluster{nodes: [2]string{filepath.Join(root, "node1"), filepath.Join(root, "node2")},
		brickfs: filepath.Join(root, "brickfs"), volume: strings.TrimSpace(string(vol))}
	for _, m := range append(g.nodes[:], g.brickfs) {
		var st, parent unix.Stat_t
		if unix.Stat(m, &st) != nil || unix.Stat(filepath.Dir(m), &parent) != nil || st.Dev == parent.Dev {
			t.Fatalf("%s is not mounted (run test/gluster/up.sh)", m)
		}
	}
	dir, err = os.MkdirTemp(g.nodes[0], "test-")
	must(t, err)
	t.Cleanup(func() {
		g.startBrick(t) // a test that failed with the brick down leaves it up for the next
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing the test's directory of the volume: %v", err)
		}
	})
	return g, filepath.Base(dir)
}

// on returns dir, a directory of the volume, as node i sees it.
func (g gluster) on(i int, dir string) string { return filepath.Join(g.nodes[i], dir) }

// onBrick returns where the brick's file system holds path, a path
// under the first client mount (the volume has one brick).
func (g gluster) onBrick(t *testing.T, path string) string {
	t.Helper()
	rel, err := filepath.Rel(g.nodes[0], path)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("%s is not under the client mount %s", path, g.nodes[0])
	}
	return filepath.Join(g.brickfs, "brick", rel)
}

// brickPID returns the PID of the brick process, 0 when it is down.
func (g gluster) brickPID(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("gluster", "--mode=script", "volume", "status", g.volume).CombinedOutput()
	if err != nil {
		t.Fatalf("gluster volume status: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "Brick" && f[len(f)-2] == "Y" {
			if pid, err := strconv.Atoi(f[len(f)-1]); err == nil {
				return pid
			}
		}
	}
	return 0
}

// startBrick starts the brick again if it is down, and waits until both
// clients have reconnected to it.
func (g gluster) startBrick(t *testing.T) {
	t.Helper()
	if g.brickPID(t) == 0 {
		if out, err := exec.Command("gluster", "--mode=script", "volume", "start", g.volume, "force").CombinedOutput(); err != nil {
			t.Fatalf("restarting the brick: %v\n%s", err, out)
		}
	}
	for _, m := range g.nodes {
		var err error
		if !testenv.Until(settle, func() bool { _, err = os.ReadDir(m); return err == nil }) {
			t.Fatalf("%s unusable %v after the brick was started: %v", m, settle, err)
		}
	}
}

// glusterNode is a node whose PFS is dir on mount i of the volume.
func glusterNode(t *testing.T, g gluster, i int, dir string) *node {
	t.Helper()
	n := newNode(t)
	n.pfs = g.on(i, dir)
	return n
}

// checkOnBoth checks that every destination holds its source's bytes as
// both nodes read it.
func checkOnBoth(t *testing.T, g gluster, v transfer.View, srcs map[string][]byte) {
	t.Helper()
	checkFlushed(t, v, srcs)
	for src, data := range srcs {
		f, _ := file(v, src)
		for i := range g.nodes {
			rel, err := filepath.Rel(g.nodes[0], f.Dest)
			if err != nil || strings.HasPrefix(rel, "..") {
				rel, _ = filepath.Rel(g.nodes[1], f.Dest)
			}
			got, err := os.ReadFile(filepath.Join(g.nodes[i], rel))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s as node %d reads it: %d bytes (%v), not its source's %d", f.Dest, i+1, len(got), err, len(data))
			}
		}
	}
}

// TestGlusterFlush: a large file and many small ones flushed to GlusterFS
// through its FUSE client (no O_TMPFILE, no syncfs: the copy's fallbacks
// run), byte-exact as either node reads them.
func TestGlusterFlush(t *testing.T) {
	g, dir := glusterFS(t)
	n := glusterNode(t, g, 0, dir)
	srcs := map[string][]byte{}
	src, data := n.checkpoint("big.ckpt", 48*mib)
	srcs[src] = data
	n.add(src, n.dest("big.ckpt"))
	for i := range 150 {
		name := fmt.Sprintf("rank_%03d.ckpt", i)
		src, data := n.checkpoint(name, 1000+i*97)
		srcs[src] = data
		n.add(src, n.dest(name))
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	n.start("--poll=100ms")
	v := n.waitFor("DONE on GlusterFS", 3*settle, done)
	checkOnBoth(t, g, v, srcs)
}

// TestGlusterTwoNodesOneDataset: two nodes, each with its daemon, its
// transfer file and its own mount of the volume, flush their ranks' files
// into one dataset directory, as every node of an SCR job does.
func TestGlusterTwoNodesOneDataset(t *testing.T) {
	g, dir := glusterFS(t)
	srcs := [2]map[string][]byte{{}, {}}
	var nodes [2]*node
	for i := range nodes {
		n := glusterNode(t, g, i, dir)
		nodes[i] = n
		for r := range 40 {
			name := fmt.Sprintf("rank_%d.ckpt", r*2+i)
			size := 20000 + r*1013
			if r == 0 {
				size = 12 * mib
			}
			src, data := n.checkpoint(name, size)
			srcs[i][src] = data
			n.add(src, n.dest(name))
		}
		n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	}
	for _, n := range nodes {
		n.start("--poll=100ms")
	}
	for i, n := range nodes {
		v := n.waitFor(fmt.Sprintf("DONE on node %d", i+1), 3*settle, done)
		checkOnBoth(t, g, v, srcs[i])
	}
	ents, err := os.ReadDir(filepath.Dir(nodes[0].dest("x")))
	must(t, err)
	if len(ents) != 80 {
		t.Errorf("the dataset directory holds %d entries, want the 80 ranks' files", len(ents))
	}
}

// recordedWhileDown polls the transfer file while a fault lasts and
// returns the largest WRITTEN recorded, failing at once on DONE or on a
// WRITTEN above what was durable before: nothing can become durable while
// the brick is gone or full.
func recordedWhileDown(t *testing.T, n *node, src string, lasting time.Duration) (most int64, errSeen string) {
	t.Helper()
	for end := time.Now().Add(lasting); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		v := n.view()
		f, _ := file(v, src)
		if v.Done || f.Written == f.Size {
			t.Fatalf("recorded complete (DONE %v, WRITTEN %d) while the PFS could not take the bytes", v.Done, f.Written)
		}
		most = max(most, f.Written)
		if f.Error != "" {
			errSeen = f.Error
		}
	}
	return most, errSeen
}

// verifyDurable fails unless the copy of f (partial or published) begins
// with at least written bytes of its source.
func verifyDurable(t *testing.T, dest string, data []byte, written int64) {
	t.Helper()
	var best int64
	for _, p := range []string{flush.TempPath(dest), dest} {
		k, err := prefixOf(p, data)
		if err != nil {
			t.Fatalf("reading the copy: %v", err)
		}
		best = max(best, k)
	}
	if best < written {
		t.Fatalf("WRITTEN %d recorded, but only %d bytes of the copy of %s are the source's", written, best, dest)
	}
}

// TestGlusterBrickKilled: the brick process killed mid-flush (the PFS gone)
// and started again: nothing false is recorded meanwhile, and the flush
// completes byte-exact once it is back.
func TestGlusterBrickKilled(t *testing.T) {
	g, dir := glusterFS(t)
	n := glusterNode(t, g, 0, dir)
	src, data := n.checkpoint("a.ckpt", 16*mib)
	n.add(src, n.dest("a.ckpt"))
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 4*mib)
		transfer.SetCommand(tr, transfer.Run)
	})
	n.start("--sync-interval=200ms", "--poll=100ms")
	before := n.waitFor("bytes durable", settle, func(v transfer.View) bool { return v.Files[0].Written > 0 }).Files[0].Written
	pid := g.brickPID(t)
	if pid == 0 {
		t.Fatal("the brick is not running")
	}
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	most, errSeen := recordedWhileDown(t, n, src, 4*time.Second)
	g.startBrick(t)
	verifyDurable(t, n.dest("a.ckpt"), data, most)
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v := n.waitFor("DONE after the brick returned", 3*settle, done)
	checkOnBoth(t, g, v, map[string][]byte{src: data})
	t.Logf("brick down: WRITTEN went from %d to at most %d; ERROR seen: %q", before, most, errSeen)
}

// TestGlusterBrickFull: the brick's file system full mid-flush: a clear
// ERROR on the file, nothing false recorded, and the flush completes
// byte-exact once room is made.
func TestGlusterBrickFull(t *testing.T) {
	g, dir := glusterFS(t)
	n := glusterNode(t, g, 0, dir)
	src, data := n.checkpoint("a.ckpt", 24*mib)
	n.add(src, n.dest("a.ckpt"))
	filler := fillBrick(t, g.brickfs, "filler-"+dir)
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	n.start("--sync-interval=200ms", "--poll=100ms")
	v := n.waitFor("an ERROR on the full PFS", 3*settle, func(v transfer.View) bool { return v.Files[0].Error != "" })
	if e := v.Files[0].Error; !strings.Contains(e, "no space") {
		t.Errorf("ERROR %q does not say the PFS is out of space", e)
	}
	most, _ := recordedWhileDown(t, n, src, 2*time.Second)
	// Read on the brick, as the server holds the bytes: the client may
	// answer an open of a file whose writes failed with ENOSPC while the
	// brick is full.
	verifyDurable(t, g.onBrick(t, n.dest("a.ckpt")), data, most)
	must(t, os.Remove(filler))
	v = n.waitFor("DONE once there is room", 3*settle, done)
	checkOnBoth(t, g, v, map[string][]byte{src: data})
}

// fillBrick fills the brick's file system from the server's side, in
// chunks until none fits, then frees one small chunk: less room than the
// volume's reserve (storage.reserve, 1% by default), so that the brick
// refuses data while its metadata still has room. It returns the filler
// file, removed when the test ends.
func fillBrick(t *testing.T, fs, name string) string {
	t.Helper()
	filler := filepath.Join(fs, name)
	f, err := os.Create(filler)
	must(t, err)
	defer f.Close()
	t.Cleanup(func() { os.Remove(filler) })
	var off int64
	for _, chunk := range []int64{16 * mib, mib, 64 << 10} {
		for {
			err := unix.Fallocate(int(f.Fd()), 0, off, chunk)
			if errors.Is(err, unix.ENOSPC) {
				break
			}
			must(t, err)
			off += chunk
		}
	}
	must(t, f.Truncate(max(off-2*mib, 0)))
	return filler
}
