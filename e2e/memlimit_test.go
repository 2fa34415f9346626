package e2e

import (
	"math"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
)

// In a container with a memory limit, the collector keeps under nine tenths of it (Go does
// not read the limit itself: without this a large heap grows to twice its live size and
// the kernel kills the process); GOMEMLIMIT in the environment wins; without a limit, Go's
// default (none) stays.
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
		{"no limit", false, nil, math.MaxInt64},
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
