package test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/internal/testenv"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// nobody is the unprivileged user some tests hand files to or run as.
const nobody = 65534

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Absent(t, "needs root to change file owners")
	}
}

func TestRefusesForeignOrWritableTransferFile(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, n *node)
		want  string
		flags []string
	}{
		{"owned by another user", func(t *testing.T, n *node) {
			requireRoot(t)
			must(t, os.Chown(n.transfer, nobody, nobody))
		}, "refusing a transfer file owned by uid 65534", nil},
		{"owned by another user, group-writable", func(t *testing.T, n *node) {
			requireRoot(t)
			must(t, os.Chown(n.transfer, nobody, nobody))
			must(t, os.Chmod(n.transfer, 0o664))
		}, "refusing a transfer file owned by uid 65534", nil},
		{"writable by other", func(t *testing.T, n *node) {
			must(t, os.Chmod(n.transfer, 0o666))
		}, "refusing a transfer file that other users may write (mode 0666)", nil},
		{"writable by group under --strict-modes", func(t *testing.T, n *node) {
			must(t, os.Chmod(n.transfer, 0o660))
		}, "may write (mode 0660) under --strict-modes", []string{"--strict-modes"}},
		{"control directory writable by other", func(t *testing.T, n *node) {
			must(t, os.Chmod(filepath.Dir(n.transfer), 0o777))
		}, "that other users may write (mode 0777)", nil},
		{"control directory writable by group under --strict-modes", func(t *testing.T, n *node) {
			must(t, os.Chmod(filepath.Dir(n.transfer), 0o775))
		}, "may write (mode 0775) under --strict-modes", []string{"--strict-modes"}},
		{"control directory owned by another user", func(t *testing.T, n *node) {
			requireRoot(t)
			must(t, os.Chown(filepath.Dir(n.transfer), nobody, nobody))
		}, "refusing control directory", nil},
		{"symbolic link", func(t *testing.T, n *node) {
			real := filepath.Join(n.root, "elsewhere.scrinfo")
			must(t, os.Rename(n.transfer, real))
			must(t, os.Symlink(real, n.transfer))
		}, "refusing a symbolic link", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			src, data := n.checkpoint("a.ckpt", 1000)
			n.add(src, n.dest("a.ckpt"))
			n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
			must(t, os.Chmod(n.transfer, 0o600))
			before, err := os.ReadFile(n.transfer)
			must(t, err)
			tc.setup(t, n)
			d := n.start(tc.flags...)
			if code := d.Wait(settle); code == 0 {
				t.Fatal("the daemon accepted an unsafe transfer file")
			}
			if !strings.Contains(d.Log.String(), tc.want) {
				t.Fatalf("log does not say %q:\n%s", tc.want, d.Log.String())
			}
			after, err := os.ReadFile(n.transfer)
			must(t, err)
			if string(after) != string(before) {
				t.Fatal("the refused transfer file was modified")
			}
			// Told otherwise, it runs.
			n.start("--insecure")
			n.waitFor("DONE with --insecure", settle, done)
			sameFile(t, n.dest("a.ckpt"), data)
		})
	}
}

func TestConfinedPaths(t *testing.T) {
	n := newNode(t)
	outside := filepath.Join(n.root, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	okSrc, okData := n.checkpoint("ok.ckpt", 2000)
	n.add(okSrc, n.dest("ok.ckpt"))
	// A source outside the cache, reached with "..".
	secret := filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("not yours"), 0o600))
	escSrc := filepath.Join(n.cache, "..", "outside", "secret")
	// A destination outside the PFS, reached with "..".
	escDest := filepath.Join(n.pfs, "..", "outside", "planted")
	inSrc, _ := n.checkpoint("in.ckpt", 10)
	n.library(func(tr *hashfile.Tree) {
		transfer.AddFile(tr, escSrc, n.dest("secret"), 9)
		transfer.AddFile(tr, inSrc, escDest, 10)
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--allow-src="+n.cache, "--allow-dest="+n.pfs)
	v := n.waitFor("both refused, the sound file flushed", settle, func(v transfer.View) bool {
		a, _ := file(v, escSrc)
		b, _ := file(v, inSrc)
		c, _ := file(v, okSrc)
		return a.Error != "" && b.Error != "" && c.Written == c.Size && c.HasCRC
	})
	a, _ := file(v, escSrc)
	b, _ := file(v, inSrc)
	if !strings.Contains(a.Error, "outside the allowed source prefixes") || !strings.Contains(b.Error, "outside the allowed destination prefixes") {
		t.Fatalf("ERRORs: %q, %q", a.Error, b.Error)
	}
	if v.Done {
		t.Fatal("DONE with refused files")
	}
	if _, err := os.Stat(n.dest("secret")); err == nil {
		t.Fatal("a file outside --allow-src was copied")
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a file was written outside --allow-dest")
	}
	sameFile(t, n.dest("ok.ckpt"), okData)
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}

func TestNeverFollowsSymlinks(t *testing.T) {
	n := newNode(t)
	outside := filepath.Join(n.root, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	// A source that is a symbolic link to a file the job may not publish.
	secret := filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("not yours"), 0o600))
	linkSrc := filepath.Join(n.cache, "link.ckpt")
	must(t, os.Symlink(secret, linkSrc))
	// A destination whose final component is a symbolic link to a file
	// outside: the daemon must replace the link, never write through it.
	victim := filepath.Join(outside, "victim")
	must(t, os.WriteFile(victim, []byte("precious"), 0o644))
	src, data := n.checkpoint("a.ckpt", 5000)
	must(t, os.MkdirAll(filepath.Dir(n.dest("a.ckpt")), 0o755))
	must(t, os.Symlink(victim, n.dest("a.ckpt")))
	n.library(func(tr *hashfile.Tree) {
		transfer.AddFile(tr, linkSrc, n.dest("link.ckpt"), 9)
		transfer.AddFile(tr, src, n.dest("a.ckpt"), int64(len(data)))
		transfer.SetCommand(tr, transfer.Run)
	})
	n.start()
	v := n.waitFor("the link source refused, the other flushed", settle, func(v transfer.View) bool {
		l, _ := file(v, linkSrc)
		a, _ := file(v, src)
		return l.Error != "" && a.Written == a.Size && a.HasCRC
	})
	l, _ := file(v, linkSrc)
	t.Logf("ERROR: %s", l.Error)
	if !strings.Contains(l.Error, "symbolic link") && !strings.Contains(l.Error, "too many levels of symbolic links") {
		t.Fatalf("ERROR %q should say the source is a symbolic link", l.Error)
	}
	if _, err := os.Stat(n.dest("link.ckpt")); err == nil {
		t.Fatal("a symbolic-link source was copied")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatal("the daemon wrote through a symbolic link at the destination")
	}
	fi, err := os.Lstat(n.dest("a.ckpt"))
	must(t, err)
	if fi.Mode()&os.ModeSymlink != 0 {
		t.Fatal("the destination is still a symbolic link")
	}
	sameFile(t, n.dest("a.ckpt"), data)
}

func TestRunsUnprivilegedWithUmaskModes(t *testing.T) {
	requireRoot(t)
	n := newNode(t)
	src, data := n.checkpoint("a.ckpt", 3000)
	for _, d := range []string{n.cache, n.pfs, filepath.Dir(n.transfer)} {
		must(t, os.Chown(d, nobody, nobody))
	}
	must(t, os.Chown(src, nobody, nobody))
	must(t, os.Chown(n.root, nobody, nobody))
	must(t, os.Chmod(n.root, 0o755))
	n.add(src, filepath.Join(n.pfs, "out", "a.ckpt"))
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	must(t, os.Chown(n.transfer, nobody, nobody))
	// The test's parent directories must be searchable by nobody.
	for d := n.root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			must(t, os.Chmod(d, fi.Mode().Perm()|0o001))
		}
	}
	cmd := exec.Command(bins.Path(t, testenv.Daemon), n.transfer)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	log := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	oldMask := syscall.Umask(0o027)
	err := cmd.Start()
	syscall.Umask(oldMask)
	must(t, err)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	n.waitFor("DONE as an unprivileged user", settle, done)
	dest := filepath.Join(n.pfs, "out", "a.ckpt")
	sameFile(t, dest, data)
	fi, err := os.Stat(dest)
	must(t, err)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("new file mode %v, want 0640 from umask 027", fi.Mode().Perm())
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != nobody {
		t.Errorf("file owned by uid %d, want the daemon's %d", st.Uid, nobody)
	}
	di, err := os.Stat(filepath.Dir(dest))
	must(t, err)
	if di.Mode().Perm() != 0o750 {
		t.Errorf("new directory mode %v, want 0750 from umask 027", di.Mode().Perm())
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", log.String())
	}
}

// TestSymlinkRace swaps directories on the source and destination paths for
// symbolic links to a directory outside the allowed prefixes, over and over,
// while the daemon flushes: whatever it checked a moment before, nothing may
// be read from or written to the outside directory.
func TestSymlinkRace(t *testing.T) {
	testenv.Long(t, "swaps directories for symbolic links for seconds during flushes")
	n := newNode(t)
	outside := filepath.Join(n.root, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	srcDir := filepath.Join(n.cache, "sub")
	dstDir := filepath.Join(n.pfs, "flip")
	must(t, os.MkdirAll(srcDir, 0o755))
	must(t, os.MkdirAll(dstDir, 0o755))
	const files = 40
	want := map[string][]byte{}
	secret := []byte(strings.Repeat("S", 65536))
	for i := range files {
		name := "rank_" + strconv.Itoa(i) + ".ckpt"
		src := filepath.Join(srcDir, name)
		data := bytes.Repeat([]byte{byte('a' + i%26)}, 65536)
		must(t, os.WriteFile(src, data, 0o644))
		must(t, os.WriteFile(filepath.Join(outside, name), secret, 0o644)) // same size, other content
		want[src] = data
		n.library(func(tr *hashfile.Tree) { transfer.AddFile(tr, src, filepath.Join(dstDir, name), int64(len(data))) })
	}
	n.library(func(tr *hashfile.Tree) {
		transfer.SetBW(tr, 2e6) // about 1.3 s of copying: many swaps land mid-flush
		transfer.SetCommand(tr, transfer.Run)
	})
	// Each swap exchanges a real directory with a symbolic link to the
	// outside atomically (RENAME_EXCHANGE), so the path never goes missing.
	for _, d := range []string{srcDir, dstDir} {
		must(t, os.Symlink(outside, d+".link"))
	}
	exchange := func(d string) error {
		return unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, d+".link", unix.RENAME_EXCHANGE)
	}
	stop := make(chan struct{})
	swaps := make(chan int)
	var swapErr error
	go func() {
		count := 0
		defer func() { swaps <- count }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 2 { // to the link and back
				for _, d := range []string{srcDir, dstDir} {
					if swapErr = exchange(d); swapErr != nil {
						return
					}
				}
			}
			count++
		}
	}()
	d := n.start("--allow-src="+n.cache, "--allow-dest="+n.pfs, "--sync-interval=50ms")
	n.waitFor("half the files flushed while swapping", settle, func(v transfer.View) bool {
		c := 0
		for _, f := range v.Files {
			if f.Written == f.Size {
				c++
			}
		}
		return c >= files/2
	})
	close(stop)
	count := <-swaps
	t.Logf("%d swaps of both directories during the flush", count)
	if swapErr != nil {
		t.Fatalf("swapping: %v", swapErr)
	}
	if count < 10 {
		t.Fatalf("only %d swaps: the race was not exercised", count)
	}
	for _, dir := range []string{srcDir, dstDir} {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("%s was left as a link: %v", dir, err)
		}
	}
	n.library(func(tr *hashfile.Tree) { transfer.SetBW(tr, noLimit) })
	v := n.waitFor("DONE once the swapping stopped", settle, done)
	for _, f := range v.Files {
		sameFile(t, f.Dest, want[f.Src])
	}
	entries, err := os.ReadDir(outside)
	must(t, err)
	if len(entries) != files {
		t.Fatalf("%d entries outside, want the %d planted ones: something was written there", len(entries), files)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(outside, e.Name()))
		must(t, err)
		if !bytes.Equal(b, secret) {
			t.Fatalf("%s outside was modified", e.Name())
		}
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}
