// Package shareddata locates the reference files written by the real C
// libraries (KVTree, SIONlib, FTI, QIO/LIME), which live in ../shared/testdata
// beside the repository. Interop tests use it: under CI (CI=true) a missing
// folder fails the test, elsewhere it skips with a message saying why.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of ../shared/testdata/<sub> relative to the
// repository root (the directory holding go.mod), failing or skipping t when
// it is missing.
func Dir(t testing.TB, sub string) string {
	t.Helper()
	dir, err := Find(sub)
	if err == nil {
		return dir
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("shared test data missing under CI: %v", err)
	}
	t.Skipf("shared test data not available (%v); place the shared folder beside the repository to run this interop test", err)
	return ""
}

// File returns the path of a file in ../shared/testdata/<sub>, failing or
// skipping t like Dir.
func File(t testing.TB, sub, name string) string {
	t.Helper()
	return filepath.Join(Dir(t, sub), name)
}

// Find returns the path of ../shared/testdata/<sub>, or an error if it is
// missing. Fuzz targets use it to add the shared samples to their seed corpus
// when they are present.
func Find(sub string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir := filepath.Join(filepath.Dir(d), "shared", "testdata", sub)
			if _, err := os.Stat(dir); err != nil {
				return "", err
			}
			return dir, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", &os.PathError{Op: "find", Path: wd, Err: os.ErrNotExist}
		}
		d = parent
	}
}
