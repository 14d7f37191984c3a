package deploy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// bins is this package's once-per-process build of scr-transferd and
// scr-ctl, built the first time a test asks for them (a test skipped for
// a missing tool or under -short builds nothing).
var bins = testenv.NewBinaries(testenv.Build{})

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins)) }

// builtBinary returns the path of a binary built for the tests.
func builtBinary(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(bins.Need(t), name)
}
