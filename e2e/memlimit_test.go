package e2e

import (
	"errors"
	"math"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/snigate/snigate/internal/testutil"
)

// In a container with a memory limit, the collector keeps under nine tenths of it (Go does
// not read the limit itself: without this a large heap grows to twice its live size and
// the kernel kills the process); GOMEMLIMIT in the environment wins; in the test's own cgroup,
// nine tenths of its limit if it has one, else Go's default (none).
func TestMemoryLimitFromCgroup(t *testing.T) {
	dir := configDir(t)
	writeFile(t, dir, "gw.yaml", gatewayYAML(passthrough("tls", testutil.FreePort(t), "*.example.test")))
	argv := serveArgv(dir, "--bind", "127.0.0.1")
	const limit = 256 << 20
	for _, c := range []struct {
		name   string
		cgroup bool
		env    []string
		want   float64
	}{
		{"a 256 MiB container", true, nil, limit / 10 * 9},
		{"GOMEMLIMIT set", true, []string{"GOMEMLIMIT=100MiB"}, 100 << 20},
		{"the test's own cgroup", false, nil, ownLimit(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cg *testutil.Cgroup
			if c.cgroup {
				cg = testutil.MemoryCgroup(t, limit)
			}
			g := startSnigateIn(t, cg, dir, c.env, argv...)
			if got := g.dbMetric(t, "go_gc_gomemlimit_bytes"); got != c.want {
				t.Errorf("go_gc_gomemlimit_bytes = %.0f, want %.0f", got, c.want)
			}
		})
	}
}

// ownLimit is the soft limit snigate sets in the test's own cgroup: nine tenths of its
// memory limit, or none (MaxInt64) on a machine whose test runs unlimited.
func ownLimit(t *testing.T) float64 {
	n, err := memlimit.FromCgroup()
	switch {
	case err == nil && n > 0:
		return float64(int64(n) / 10 * 9)
	case err == nil, errors.Is(err, memlimit.ErrNoLimit), errors.Is(err, memlimit.ErrNoCgroup):
		return math.MaxInt64
	default:
		t.Fatalf("the test's own cgroup memory limit: %v", err)
		return 0
	}
}
