package testenv

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

// update is the one golden-file switch: `go test ./pkg -run X -update`
// rewrites the golden files of the tests it runs instead of comparing.
var update = flag.Bool("update", false, "rewrite the golden files the tests compare with (testdata/…)")

// Golden compares got with the golden file at path (conventionally under
// testdata/), failing tb with both if they differ; under -update it
// writes got to path instead. Rewrite golden files only after a
// deliberate change, and read their diff.
func Golden(tb testing.TB, path string, got []byte) {
	tb.Helper()
	golden(tb, path, got, *update)
}

// golden is Golden with the -update switch as an argument.
func golden(tb testing.TB, path string, got []byte, rewrite bool) {
	tb.Helper()
	if rewrite {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatalf("rewriting the golden file: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		tb.Errorf("%s differs from what the test produced (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
