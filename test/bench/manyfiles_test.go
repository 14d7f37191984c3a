package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckCopies: the many-files section takes a flush as done only when
// every DESTINATION holds its source's bytes.
func TestCheckCopies(t *testing.T) {
	const n, size = 3, 4096
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dst string) // what happens to the copy of rank000001
		want  string                         // in the error, "" for none
	}{
		{"intact", func(*testing.T, string) {}, ""},
		{"one byte changed", func(t *testing.T, dst string) {
			p := filepath.Join(dst, "rank000001.ckpt")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[size/2] ^= 1
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "rank000001.ckpt: not its source's bytes"},
		{"short", func(t *testing.T, dst string) {
			if err := os.Truncate(filepath.Join(dst, "rank000001.ckpt"), size-1); err != nil {
				t.Fatal(err)
			}
		}, "rank000001.ckpt: 4095 bytes, its source 4096"},
		{"missing", func(t *testing.T, dst string) {
			if err := os.Remove(filepath.Join(dst, "rank000001.ckpt")); err != nil {
				t.Fatal(err)
			}
		}, "rank000001.ckpt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			paths := make([]string, n)
			for i := range paths {
				paths[i] = filepath.Join(src, fmt.Sprintf("rank%06d.ckpt", i))
				if err := os.WriteFile(filepath.Join(dst, filepath.Base(paths[i])), pattern(i, size), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tc.spoil(t, dst)
			err := checkCopies(paths, dst, size)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("checkCopies: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("checkCopies: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
