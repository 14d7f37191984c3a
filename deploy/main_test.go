package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// builtEnv names the directory holding scr-transferd and scr-ctl, built
// once by TestMain for every test of the package (each build would
// otherwise link both again under a loaded machine).
const builtEnv = "DEPLOY_TEST_BIN"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploy-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := exec.Command("go", "build", "-o", dir, "../cmd/scr-transferd", "../cmd/scr-ctl").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	os.Setenv(builtEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// builtBinary returns the path of a binary TestMain built.
func builtBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(builtEnv)
	if dir == "" {
		t.Fatal("the binaries were not built")
	}
	return filepath.Join(dir, name)
}
