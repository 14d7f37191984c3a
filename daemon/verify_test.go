package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/flush"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

// countingReader counts the bytes read through ReadAt.
type countingReader struct {
	r io.ReaderAt
	n *atomic.Int64
}

func (c countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// countingVerifier is the daemon's verifier with every read of the source
// counted: the structure the check reads through the descriptor, and the
// bytes the copy reads and feeds to it.
type countingVerifier struct {
	v         *checkpointVerifier
	structure atomic.Int64
	fed       int64
}

func (c *countingVerifier) Start(ctx context.Context, src io.ReaderAt, size int64) (flush.Check, []flush.Range, error) {
	chk, rs, err := c.v.Start(ctx, countingReader{src, &c.structure}, size)
	if chk != nil {
		chk = &countingCheck{Check: chk, fed: &c.fed}
	}
	return chk, rs, err
}

type countingCheck struct {
	flush.Check
	fed *int64
}

func (c *countingCheck) Feed(off int64, p []byte) error {
	*c.fed += int64(len(p))
	return c.Check.Feed(off, p)
}

// TestVerificationReadsTheSourceOnce copies every shared checkpoint sample
// with verification, as --verify=before does, and counts the bytes read
// from the source: the copy's reads (all of them go to the check) plus the
// structure the check reads itself. A damaged sample is refused, nothing is
// published and no partial copy is left; and no sample is read twice: the
// total stays within the file's size plus the structure read before the
// copy (at most the 64 KiB tail FTI-FF's file meta is looked for in, a
// chunk table and LIME headers), where checking before copying read the
// whole file and then copied it again.
func TestVerificationReadsTheSourceOnce(t *testing.T) {
	const structureAllowance = 64<<10 + 8<<10
	cases := []struct{ sub, name, code string }{
		{"ftiff", "Ckpt4-Rank1.data-flip.fti", "E_CHUNK_HASH"},
		{"ftiff", "Ckpt5-Rank0.meta-flip.fti", "E_META_HASH"},
		{"ftiff", "Ckpt6-Rank0.truncated.fti", "E_META_HASH"},
		{"lime", "damaged_bitflip_su3_4x4x4x8_f.lime", "E_CHECKSUM"},
		{"lime", "damaged_truncated_su3_4x4x4x8_f.lime", "E_TRUNCATED_PAYLOAD"},
		{"sion", "bad_magic.sion", "E_BAD_MAGIC"},
		{"sion", "bad_meta2_offset.sion", "E_META2_OUT_OF_BOUNDS"},
		{"ftiff", "Ckpt4-Rank1.fti", ""},
		{"ftiff", "Ckpt7-Rank1.fti", ""},
		{"lime", "su3_4x4x4x8_f.lime", ""},
		{"lime", "su3_4x4x4x8_ildg.lime", ""},
		{"sion", "multiblk_4t_serial.sion", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(shareddata.File(t, tc.sub, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cacheDir, pfs := filepath.Join(dir, "cache"), filepath.Join(dir, "pfs")
			if err := os.Mkdir(cacheDir, 0o700); err != nil {
				t.Fatal(err)
			}
			src, dst := filepath.Join(cacheDir, tc.name), filepath.Join(pfs, tc.name)
			if err := os.WriteFile(src, data, 0o600); err != nil {
				t.Fatal(err)
			}
			cv := &countingVerifier{v: &checkpointVerifier{path: src, root: cacheDir}}
			job := flush.Job{Src: src, Dst: dst, Size: int64(len(data)), SrcRoot: cacheDir, Verify: cv}
			res, err := flush.NewCopier(nil, flush.Options{}).Copy(t.Context(), job, nil)
			read := cv.structure.Load() + cv.fed
			t.Logf("size %d, structure read %d, fed %d", len(data), cv.structure.Load(), cv.fed)
			if read > int64(len(data))+structureAllowance {
				t.Errorf("%d bytes read from a source of %d: it was read more than once", read, len(data))
			}
			if tc.code == "" {
				if err != nil || !res.Complete {
					t.Fatalf("sound sample: %+v, %v", res, err)
				}
				if got, _ := os.ReadFile(dst); string(got) != string(data) {
					t.Error("the published copy differs from the source")
				}
				if cv.v.rep == nil {
					t.Error("no report for a sound sample")
				}
				return
			}
			var fe *cache.FormatError
			if !errors.As(err, &fe) || fe.Code != tc.code || !strings.Contains(err.Error(), "checking the checkpoint") {
				t.Fatalf("error %v, want a FormatError %s", err, tc.code)
			}
			if res.Complete || res.Written != 0 {
				t.Errorf("result %+v for a corrupt sample", res)
			}
			for _, p := range []string{dst, flush.TempPath(dst)} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after a refusal (%v)", p, err)
				}
			}
		})
	}
}

// TestVerificationOnResume: a copy resumed from a partial copy shows the
// check the source's prefix too, so a damaged chunk in the part copied
// before is still found, the partial copy removed and 0 recorded; a sound
// file resumes and is published.
func TestVerificationOnResume(t *testing.T) {
	for _, tc := range []struct{ name, code string }{
		{"Ckpt4-Rank1.data-flip.fti", "E_CHUNK_HASH"},
		{"Ckpt4-Rank1.fti", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(shareddata.File(t, "ftiff", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			src, dst := filepath.Join(dir, tc.name), filepath.Join(dir, "pfs", tc.name)
			if err := os.WriteFile(src, data, 0o600); err != nil {
				t.Fatal(err)
			}
			// A partial copy past the damaged chunk (240000..400000).
			const written = 600000
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(flush.TempPath(dst), data[:written], 0o600); err != nil {
				t.Fatal(err)
			}
			var commits []int64
			job := flush.Job{Src: src, Dst: dst, Size: int64(len(data)), Written: written,
				Verify: &checkpointVerifier{path: src, root: "/"}}
			res, err := flush.NewCopier(nil, flush.Options{}).Copy(t.Context(), job, func(n int64, _ uint32) error {
				commits = append(commits, n)
				return nil
			})
			if tc.code == "" {
				if err != nil || !res.Complete {
					t.Fatalf("%+v, %v", res, err)
				}
				if got, _ := os.ReadFile(dst); string(got) != string(data) {
					t.Error("published copy differs")
				}
				return
			}
			var fe *cache.FormatError
			if !errors.As(err, &fe) || fe.Code != tc.code {
				t.Fatalf("error %v, want %s", err, tc.code)
			}
			if len(commits) == 0 || commits[len(commits)-1] != 0 || res.Written != 0 {
				t.Errorf("commits %v, result %+v: WRITTEN should return to 0", commits, res)
			}
			if _, err := os.Lstat(flush.TempPath(dst)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("partial copy left: %v", err)
			}
		})
	}
}

// TestSmallSourceIsReadOnce copies small sources with verification and
// counts the bytes the process reads meanwhile (rchar in /proc/self/io):
// a source that fits one piece of the copy is read once, by one read that
// the check and the copy share, where the check used to read the file's
// structure through a descriptor of its own first (a plain 64 KiB file
// was read twice over, an FTI-FF file's last 64 KiB twice). The copy runs
// in a child process of its own, so that no other test reads anything
// meanwhile; the Go runtime's own reads (its poller's eventfd, the
// cgroup's CPU limit), in the copy or in taking the count, are a few
// bytes, within the slack.
func TestSmallSourceIsReadOnce(t *testing.T) {
	if os.Getenv("SCR_TEST_READ_ONCE") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSmallSourceIsReadOnce$", "-test.v")
		cmd.Env = append(os.Environ(), "SCR_TEST_READ_ONCE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("child:\n%s", out)
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		return
	}
	plain := make([]byte, 64<<10)
	for i := range plain {
		plain[i] = byte(i * 7)
	}
	cases := []struct {
		name string
		data func(t *testing.T) []byte
		code string
	}{
		{"plain", func(*testing.T) []byte { return plain }, ""},
		{"Ckpt4-Rank1.fti", sample("ftiff", "Ckpt4-Rank1.fti"), ""},
		{"Ckpt4-Rank1.data-flip.fti", sample("ftiff", "Ckpt4-Rank1.data-flip.fti"), "E_CHUNK_HASH"},
		{"su3_4x4x4x8_f.lime", sample("lime", "su3_4x4x4x8_f.lime"), ""},
		{"single_4t_1blk.sion", sample("sion", "single_4t_1blk.sion"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data(t)
			if len(data) > flush.DefaultBufSize {
				t.Fatalf("%d bytes: not a small source", len(data))
			}
			dir := t.TempDir()
			src, dst := filepath.Join(dir, tc.name), filepath.Join(dir, "pfs", tc.name)
			if err := os.WriteFile(src, data, 0o600); err != nil {
				t.Fatal(err)
			}
			job := flush.Job{Src: src, Dst: dst, Size: int64(len(data)), SrcRoot: dir,
				Verify: &checkpointVerifier{path: src, root: dir}}
			c := flush.NewCopier(nil, flush.Options{})
			s0 := bytesRead(t)
			s1 := bytesRead(t) // what taking a count costs
			res, err := c.Copy(t.Context(), job, nil)
			s2 := bytesRead(t)
			const slack = 1 << 10
			if read := s2 - s1 - (s1 - s0); read <= int64(len(data))-slack || read >= int64(len(data))+slack {
				t.Errorf("%d bytes read for a source of %d bytes, want it read once", read, len(data))
			}
			if tc.code != "" {
				var fe *cache.FormatError
				if !errors.As(err, &fe) || fe.Code != tc.code {
					t.Fatalf("error %v, want a FormatError %s", err, tc.code)
				}
				return
			}
			if err != nil || !res.Complete {
				t.Fatalf("%+v, %v", res, err)
			}
			if got, _ := os.ReadFile(dst); string(got) != string(data) {
				t.Error("the published copy differs from the source")
			}
		})
	}
}

// sample returns a reader of a shared sample's bytes.
func sample(sub, name string) func(*testing.T) []byte {
	return func(t *testing.T) []byte {
		data, err := os.ReadFile(shareddata.File(t, sub, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
}

// bytesRead returns the bytes this process has read (rchar in
// /proc/self/io).
func bytesRead(t *testing.T) int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}
