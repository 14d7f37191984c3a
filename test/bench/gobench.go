package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/internal/shareddata"
)

// goBench runs a package's Go benchmarks and returns their result lines.
func goBench(pkg, pattern, benchtime string) ([]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-benchmem", pkg)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench %s %s: %v\n%s", pattern, pkg, err, out)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Benchmark") {
			lines = append(lines, sc.Text())
		}
	}
	return lines, nil
}

// fields splits a benchmark line into its name and "value unit" pairs.
func fields(line string) (name string, metrics map[string]string) {
	f := strings.Fields(line)
	metrics = map[string]string{}
	for i := 2; i+1 < len(f); i += 2 {
		metrics[f[i+1]] = f[i]
	}
	return strings.TrimSuffix(f[0], "-"+lastDash(f[0])), metrics
}

func lastDash(s string) string {
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

// hashfileBench reports the locked update of transfer files of growing size.
func (b *bench) hashfileBench() error {
	lines, err := goBench("./hashfile", "LockedUpdate|Decode", "1s")
	if err != nil {
		return err
	}
	fmt.Println("## Transfer file: one locked update (lock, read, decode, change WRITTEN, encode, rewrite, fsync, unlock) and a decode")
	fmt.Println()
	fmt.Println("| benchmark | time | allocations |")
	fmt.Println("|---|---:|---:|")
	for _, l := range lines {
		name, m := fields(l)
		fmt.Printf("| %s | %s ms | %s |\n", strings.TrimPrefix(name, "Benchmark"), nsToMs(m["ns/op"]), m["allocs/op"])
	}
	fmt.Println()
	return nil
}

func nsToMs(ns string) string {
	var v float64
	if _, err := fmt.Sscan(ns, &v); err != nil {
		return ns
	}
	return fmt.Sprintf("%.3f", v/1e6)
}

// verifyThroughput compares checkpoint verification with md5sum and cksum
// over the same page-cached files, interleaved in every iteration.
func (b *bench) verifyThroughput() error {
	lines, err := goBench("./cache", "VerifyVsTools", "10x")
	if err != nil {
		return err
	}
	fmt.Println("## Checkpoint verification vs the tool with the same kind of checksum, same page-cached file, interleaved in every iteration")
	fmt.Println()
	fmt.Println("FTI-FF checks MD5 hashes, so it is compared with md5sum; SciDAC/LIME checks CRC-style checksums, so with cksum. Above 1 = faster than the tool.")
	fmt.Println()
	fmt.Println("| file | ours MB/s | tool | tool MB/s | ratio (wall) | ratio (CPU) |")
	fmt.Println("|---|---:|---|---:|---:|---:|")
	for _, l := range lines {
		name, m := fields(l)
		name = strings.TrimPrefix(name, "BenchmarkVerifyVsTools/")
		tool := "cksum"
		if strings.HasSuffix(name, ".fti") {
			tool = "md5sum"
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", name, m["cache-MB/s"], tool, m[tool+"-MB/s"], m["x-"+tool], m["x-"+tool+"-cpu"])
	}
	fmt.Println()
	return nil
}

// sparseFlush flushes the shared SIONlib container with 4 MiB of apparent
// size and 17.6 KB of data, from a fully allocated source, and compares the
// blocks allocated at the destination with cp's.
func (b *bench) sparseFlush() error {
	dir, err := shareddata.Find("sion")
	if err != nil {
		return fmt.Errorf("the shared SION sample is needed: %w", err)
	}
	full, err := os.ReadFile(filepath.Join(dir, "sparse_4t_bigchunk.sion"))
	if err != nil {
		return err
	}
	src := filepath.Join(b.cache, "sparse_4t_bigchunk.sion")
	if err := os.WriteFile(src, full, 0o644); err != nil { // fully allocated, like a git checkout
		return err
	}
	rep, err := cache.Inspect(b.ctx(), src)
	if err != nil {
		return err
	}
	if err := b.startDaemonWith("--verify=before"); err != nil {
		return err
	}
	rows := []struct{ name, path string }{}
	for _, mode := range []string{"never", "auto", "always"} {
		dst := filepath.Join(b.pfs, "cp-"+mode+".sion")
		if _, err := timeCmd("cp", "--sparse="+mode, src, dst); err != nil {
			return err
		}
		rows = append(rows, struct{ name, path string }{"cp --sparse=" + mode, dst})
	}
	dst := filepath.Join(b.pfs, "daemon.sion")
	if _, err := b.flush(src, dst, int64(len(full)), 0, 0); err != nil {
		return err
	}
	rows = append(rows, struct{ name, path string }{"scr-transferd (SION data ranges)", dst})
	if _, err := timeCmd("sync"); err != nil {
		return err
	}
	fmt.Printf("## Sparse SION flush: %s, %d bytes apparent, %d data bytes in %d ranges, source fully allocated\n\n",
		filepath.Base(src), len(full), rep.DataBytes, len(rep.Ranges))
	fmt.Println("| copy | bytes allocated at the destination | vs data bytes | identical |")
	fmt.Println("|---|---:|---:|---|")
	for _, r := range rows {
		var st syscall.Stat_t
		if err := syscall.Stat(r.path, &st); err != nil {
			return err
		}
		got, err := os.ReadFile(r.path)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %d | %.2f× | %v |\n", r.name, st.Blocks*512, float64(st.Blocks*512)/float64(rep.DataBytes), bytes.Equal(got, full))
		if r.path == dst {
			b.record(figure{goal: "sparse SION flush: bytes allocated at the destination", unit: "B", value: float64(st.Blocks * 512), sense: lower})
		}
		os.Remove(r.path)
	}
	fmt.Println()
	return nil
}
