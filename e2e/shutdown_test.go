package e2e

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// stopsWithoutRefusing checks how g, serving sni on addr, stops on SIGTERM: /readyz fails at
// once while new connections are still accepted for --shutdown-grace (grace: the endpoints or
// load balancer in front of it take that long to drop it), then the listener closes and an
// open session goes on until it ends or --drain-timeout (drain) passes; the process exits 0.
func stopsWithoutRefusing(t *testing.T, g *gateway, addr, sni string, ca *testutil.CA, grace, drain time.Duration) {
	t.Helper()
	held := dialEcho(t, addr, sni, ca)
	defer held.Close()

	g.signal(t, syscall.SIGTERM)
	stopped := time.Now()
	kubetest.Eventually(t, time.Second, "/readyz failing at once", func() error {
		code, body, err := g.get("/readyz")
		if err != nil || code != 503 || !strings.Contains(string(body), "draining") {
			return fmt.Errorf("/readyz %d %q %v", code, body, err)
		}
		return nil
	})
	// During the grace: accepted as before.
	accepted := 0
	for time.Since(stopped) < grace-500*time.Millisecond {
		if err := echoOnce(addr, sni, ca); err != nil {
			t.Fatalf("a new connection %s into the grace failed: %v", time.Since(stopped).Round(time.Millisecond), err)
		}
		accepted++
		time.Sleep(50 * time.Millisecond)
	}
	// After it: refused, while the held session goes on.
	kubetest.Eventually(t, grace+2*time.Second, "the listener closed after the grace", func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return errors.New("still accepting")
		}
		return nil
	})
	closedAfter := time.Since(stopped)
	if err := roundTrip(held, "during the drain"); err != nil {
		t.Errorf("held session during the drain: %v", err)
	}
	select {
	case <-g.exited:
		t.Fatalf("exited during the drain: %v", g.exitErr)
	default:
	}
	select {
	case <-g.exited:
	case <-time.After(grace + drain + 5*time.Second):
		t.Fatal("not exited after the grace and the drain")
	}
	if g.exitErr != nil {
		t.Errorf("exit: %v, want 0", g.exitErr)
	}
	t.Logf("%d new connections accepted during the grace; listener closed %s after SIGTERM; exited %s after it (grace %s, drain %s)",
		accepted, closedAfter.Round(10*time.Millisecond), time.Since(stopped).Round(10*time.Millisecond), grace, drain)
	if closedAfter < grace {
		t.Errorf("the listener closed %s after SIGTERM, before the grace of %s", closedAfter, grace)
	}
}

// `snigate serve` behind a load balancer stops the same way: --shutdown-grace, then the
// drain.
func TestServeStopsWithoutRefusing(t *testing.T) {
	t.Parallel()
	const grace, drain = 2 * time.Second, 3 * time.Second
	g, ca, port := reloadSetup(t, "--shutdown-grace", grace.String(), "--drain-timeout", drain.String())
	stopsWithoutRefusing(t, g, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "a.test", ca, grace, drain)
}
