package deploy

import (
	"os"
	"testing"

	"github.com/scr-transferd/scr-transferd/internal/testenv"
)

// bins is this package's once-per-process build of scr-transferd and
// scr-ctl, built the first time a test asks for them (a test skipped for
// a missing tool or under -short builds nothing).
var bins = testenv.NewBinaries(testenv.Build{})

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, bins)) }
