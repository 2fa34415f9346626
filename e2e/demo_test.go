package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// The README's first command, scripts/demo.sh, really does what it prints: with
// DEMO_SELFTEST=1 it starts two PostgreSQL servers and a Redis primary and replica, serves
// examples/databases in front of them and runs its printed commands (psql verify-full by
// each name, the serial check, no SNI, plaintext psql and redis-cli refused, redis-cli
// --tls --sni, and each of cache's members by its own name), failing on a wrong answer.
// Under CI=true a skipped database is a failure.
func TestDemoScript(t *testing.T) {
	needBinary(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "DEMO_SELFTEST=1")
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/demo.sh:\n%s", out)
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v", err)
	}
	if strings.Contains(string(out), "skipped:") {
		testutil.Require(t, "PostgreSQL and Redis for the demo", errSkipped)
	}
	for _, want := range []string{"ok   psql verify-full to orders", "ok   the serial seen", "ok   redis-cli --tls --sni", "ok   cache's member r0", "ok   cache's member r1", "ok   plaintext redis-cli", "ok   the certificate probe"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the self-test", want)
		}
	}
}

var errSkipped = errors.New("the demo skipped a database whose packages are missing")
