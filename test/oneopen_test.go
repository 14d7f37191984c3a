package test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

// openWatch counts the opens of files in one directory with inotify
// (IN_OPEN), which the kernel reports for every open of any kind, FIFOs
// included, whoever makes it, and the closes of files opened for writing
// (IN_CLOSE_WRITE). Closes are watched too so that no two successive
// events are identical, which inotify would merge into one.
type openWatch struct {
	t  *testing.T
	fd int
}

func watchOpens(t *testing.T, dir string) *openWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_CLOSE_WRITE|unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	return &openWatch{t: t, fd: fd}
}

// opens returns the number of opens of each name reported so far.
func (w *openWatch) opens() map[string]int { return w.events(unix.IN_OPEN) }

// events returns the number of events in mask for each name reported so
// far, and forgets them.
func (w *openWatch) events(mask uint32) map[string]int {
	got := map[string]int{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err == unix.EAGAIN || n <= 0 {
			return got
		}
		must(w.t, err)
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)])
			if ev.Mask&mask != 0 {
				got[strings.TrimRight(name, "\x00")]++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestVerifiedSourceOpenedOnce: with --verify=before, each checkpoint is
// opened once per attempt, by the copy, and checked on that descriptor;
// a damaged one is refused all the same.
func TestVerifiedSourceOpenedOnce(t *testing.T) {
	n := newNode(t)
	type sample struct{ sub, name, code string }
	samples := []sample{
		{"ftiff", "Ckpt4-Rank1.data-flip.fti", "E_CHUNK_HASH"},
		{"ftiff", "Ckpt5-Rank0.meta-flip.fti", "E_META_HASH"},
		{"lime", "damaged_bitflip_su3_4x4x4x8_f.lime", "E_CHECKSUM"},
		{"lime", "damaged_truncated_su3_4x4x4x8_f.lime", "E_TRUNCATED_PAYLOAD"},
		{"sion", "bad_meta2_offset.sion", "E_META2_OUT_OF_BOUNDS"},
		{"ftiff", "Ckpt4-Rank1.fti", ""},
		{"lime", "su3_4x4x4x8_f.lime", ""},
		{"sion", "multiblk_4t_serial.sion", ""},
	}
	srcs := map[string]sample{}
	data := map[string][]byte{}
	for _, s := range samples {
		p, b := n.copyIn(s.sub, s.name)
		srcs[p], data[p] = s, b
		n.add(p, n.dest(s.name))
	}
	w := watchOpens(t, n.cache)
	n.library(func(tr *hashfile.Tree) { transfer.SetCommand(tr, transfer.Run) })
	// One attempt per file: no retry within the test.
	d := n.start("--verify=before", "--retry-min=1h", "--allow-src="+n.cache, "--allow-dest="+n.pfs)
	v := n.waitFor("a verdict on every file", settle, func(v transfer.View) bool {
		for _, f := range v.Files {
			if srcs[f.Src].code != "" && f.Error == "" || srcs[f.Src].code == "" && !(f.Written == f.Size && f.HasCRC) {
				return false
			}
		}
		return true
	})
	opens := w.opens()
	for _, f := range v.Files {
		s := srcs[f.Src]
		if got := opens[filepath.Base(f.Src)]; got != 1 {
			t.Errorf("%s opened %d times, want once", s.name, got)
		}
		if s.code == "" {
			sameFile(t, f.Dest, data[f.Src])
			continue
		}
		if !strings.Contains(f.Error, s.code) {
			t.Errorf("%s: ERROR %q, want %s", s.name, f.Error, s.code)
		}
		if _, err := os.Lstat(f.Dest); err == nil {
			t.Errorf("%s: a corrupt checkpoint reached the PFS", s.name)
		}
	}
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}

// TestVerifyNeverOpensOutsideAllowSrc: a source whose path lies lexically
// beneath --allow-src but goes through a symbolic link to a directory
// outside is refused without any open outside; the file out there is a
// FIFO, which a plain open for reading would block on.
func TestVerifyNeverOpensOutsideAllowSrc(t *testing.T) {
	n := newNode(t)
	outside := filepath.Join(n.root, "outside")
	must(t, os.MkdirAll(outside, 0o755))
	must(t, syscall.Mkfifo(filepath.Join(outside, "ckpt.fti"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(n.cache, "sub")))
	src := filepath.Join(n.cache, "sub", "ckpt.fti")
	okSrc, okData := n.checkpoint("ok.ckpt", 3000)
	w := watchOpens(t, outside)
	n.library(func(tr *hashfile.Tree) {
		transfer.AddFile(tr, src, n.dest("ckpt.fti"), 4096)
		transfer.AddFile(tr, okSrc, n.dest("ok.ckpt"), int64(len(okData)))
		transfer.SetCommand(tr, transfer.Run)
	})
	d := n.start("--verify=before", "--allow-src="+n.cache, "--allow-dest="+n.pfs)
	v := n.waitFor("the linked source refused, the other flushed", settle, func(v transfer.View) bool {
		a, _ := file(v, src)
		b, _ := file(v, okSrc)
		return a.Error != "" && b.Written == b.Size && b.HasCRC
	})
	a, _ := file(v, src)
	t.Logf("ERROR: %s", a.Error)
	if !strings.Contains(a.Error, "outside") {
		t.Errorf("ERROR %q should say the source leads outside its prefix", a.Error)
	}
	if got := w.opens(); len(got) > 0 {
		t.Errorf("files outside --allow-src were opened: %v", got)
	}
	sameFile(t, n.dest("ok.ckpt"), okData)
	if !d.Alive() {
		t.Fatal("daemon died")
	}
}
