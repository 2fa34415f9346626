package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

// The binary under test, built once by TestMain.
var (
	snigateBin string
	buildErr   error // set when the binary could not be built; tests then fail or skip
	noMainPkg  bool  // ./cmd/snigate does not exist (yet)
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test skips itself
	}
	tmp, err := os.MkdirTemp("", "snigate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	snigateBin, buildErr = build(tmp)
	return m.Run()
}

// build compiles ./cmd/snigate from the module root, found relative to this file so the tests
// work from any working directory. Under -race the binary is built with -race too.
func build(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the e2e source file")
	}
	root := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(root, "cmd", "snigate")); err != nil {
		noMainPkg = true
		return "", fmt.Errorf("no ./cmd/snigate in %s: %w", root, err)
	}
	bin := filepath.Join(dir, "snigate")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/snigate")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/snigate: %w\n%s", err, out)
	}
	return bin, nil
}

// needBinary skips in -short mode and stops the test when there is no binary to run: a
// missing ./cmd/snigate is a missing prerequisite (fails in CI, skips elsewhere), a build
// failure always fails.
func needBinary(t *testing.T) {
	t.Helper()
	testutil.SkipShort(t, "the end-to-end tests (they start the real binary)")
	if noMainPkg {
		testutil.Require(t, "the snigate binary (./cmd/snigate)", buildErr)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}
