package e2e

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
)

// reloadSetup starts a gateway with one passthrough listener, Services svc-a and svc-b (echo
// backends echo-a and echo-b) and the routes in routes.yaml: route-a, a.test → svc-a.
func reloadSetup(t *testing.T, args ...string) (g *gateway, ca *testutil.CA, port int) {
	t.Helper()
	ca = testutil.NewCA(t)
	port = testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", gatewayYAML(passthrough("tls", port, "")))
	writeFile(t, dir, "backends.yaml", docs(
		serviceYAML("svc-a", startEcho(t, "echo-a", ca.Issue(t, "a.test"))),
		serviceYAML("svc-b", startEcho(t, "echo-b", ca.Issue(t, "b.test"))),
	))
	writeFile(t, dir, "routes.yaml", routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")))
	return startGateway(t, dir, args...), ca, port
}

// A reload that removes a route leaves the connections it carried alone; a route added by the
// same change works right away, and the removed hostname is now rejected.
func TestReloadKeepsEstablishedConnections(t *testing.T) {
	t.Parallel()
	g, ca, port := reloadSetup(t)
	unknownB := &tls.Config{ServerName: "b.test", InsecureSkipVerify: true}
	expectRejectedTLS(t, port, unknownB)

	long := dialTLS(t, port, ca.ClientConfig("a.test"))
	wantHello(t, long.hello, "echo-a", "a.test", "1.3")
	long.roundTrip("before reload\n")

	gen := g.generation(t)
	writeFile(t, g.dir, "routes.yaml", routeYAML("route-b", "tls", []string{"b.test"}, to("svc-b")))
	g.waitGeneration(t, gen)

	long.roundTrip("after reload: my route is gone, I still flow\n")

	b := dialTLS(t, port, ca.ClientConfig("b.test"))
	wantHello(t, b.hello, "echo-b", "b.test", "1.3")
	b.roundTrip("new route\n")
	b.finish()

	before := g.rejected(t, "unknown_sni")
	expectRejectedTLS(t, port, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
	g.waitRejected(t, "unknown_sni", before+1)

	long.roundTrip("still flowing\n")
	long.finish()
}

// Invalid input keeps the previous configuration serving, and the log names the file.
func TestReloadInvalidKeepsServing(t *testing.T) {
	t.Parallel()
	g, ca, port := reloadSetup(t)
	gen := g.generation(t)

	isError := func(rec map[string]any, _ string) bool {
		lvl, _ := rec["level"].(string)
		return lvl == "ERROR" || lvl == "WARN"
	}
	// One file, overwritten with each kind of invalid content: every state of the folder
	// after the first write is invalid, so the generation must not move at all.
	const bad = "bad.yaml"
	busy := testutil.Listen(t) // a port snigate cannot bind
	busyPort := busy.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		name, content string
		wantInLog     []string // besides the file name: the object and the field or value
	}{
		{"bad YAML", "apiVersion: v1\nkind: Service\nmetadata: [unclosed\n", nil},
		{"unknown field", strings.Replace(
			routeYAML("route-c", "tls", []string{"c.test"}, to("svc-b")), "  hostnames:", "  hostnamez:", 1),
			[]string{"route-c", "hostnamez"}},
		{"invalid hostname", routeYAML("route-d", "tls", []string{"not a hostname!"}, to("svc-b")),
			[]string{"route-d", "hostnames"}},
		{"port that cannot be bound", namedGatewayYAML("gw-busy", passthrough("busy", busyPort, "")),
			[]string{"gw-busy", strconv.Itoa(busyPort)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := g.countLog(isError)
			writeFile(t, g.dir, bad, tc.content)
			rec := g.waitLog(t, "of level ERROR or WARN", seen+1, isError)
			raw, _ := json.Marshal(rec)
			t.Logf("logged: %s", raw)
			for _, w := range append([]string{bad}, tc.wantInLog...) {
				if !strings.Contains(string(raw), w) {
					t.Errorf("the error does not name %q: %s", w, raw)
				}
			}
			if got := g.generation(t); got != gen {
				t.Errorf("generation %d after invalid %s, want %d unchanged", got, bad, gen)
			}
			s := dialTLS(t, port, ca.ClientConfig("a.test"))
			wantHello(t, s.hello, "echo-a", "a.test", "1.3")
			s.finish()
		})
	}

	// The watcher still works: once the bad file is gone, a valid change applies.
	if err := os.Remove(filepath.Join(g.dir, bad)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, g.dir, "routes.yaml", docs(
		routeYAML("route-a", "tls", []string{"a.test"}, to("svc-a")),
		routeYAML("route-b", "tls", []string{"b.test"}, to("svc-b")),
	))
	deadline := time.Now().Add(waitTimeout)
	for {
		s, err := tryTLS(port, ca.ClientConfig("b.test"))
		if err == nil {
			wantHello(t, s.hello, "echo-b", "b.test", "1.3")
			s.raw.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b.test not served %v after a valid change: %v", waitTimeout, err)
		}
		time.Sleep(pollEvery)
	}
	if got := g.generation(t); got <= gen {
		t.Errorf("generation %d after a valid change, want > %d", got, gen)
	}
}

// SIGHUP reloads: the generation moves on and the gateway keeps serving.
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	g, ca, port := reloadSetup(t)
	s := dialTLS(t, port, ca.ClientConfig("a.test"))
	gen := g.generation(t)
	g.signal(t, syscall.SIGHUP)
	g.waitGeneration(t, gen)
	s.roundTrip("across SIGHUP")
	s.finish()
	s = dialTLS(t, port, ca.ClientConfig("a.test"))
	wantHello(t, s.hello, "echo-a", "a.test", "1.3")
	s.finish()
}

// SIGTERM: new connections are refused at once, an open one keeps working until it ends,
// then the process exits 0 without waiting for the drain timeout.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	const drain = 5 * time.Second
	g, ca, port := reloadSetup(t, "--drain-timeout", drain.String())
	s := dialTLS(t, port, ca.ClientConfig("a.test"))
	s.roundTrip("before SIGTERM")

	sent := time.Now()
	g.signal(t, syscall.SIGTERM)
	waitRefused(t, port)
	s.roundTrip("draining, still served")
	s.finish()
	if code := g.waitExit(t, drain+5*time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if took := time.Since(sent); took >= drain {
		t.Errorf("exited %v after SIGTERM, want before the %v drain timeout: the only connection had ended", took, drain)
	}
}

// SIGTERM with a connection that stays open: the process exits 0 at the drain timeout and
// the connection is closed.
func TestSIGTERMDrainTimeout(t *testing.T) {
	t.Parallel()
	const drainTimeout = 2 * time.Second
	g, ca, port := reloadSetup(t, "--drain-timeout", drainTimeout.String())
	s := dialTLS(t, port, ca.ClientConfig("a.test"))
	s.roundTrip("before SIGTERM")

	sent := time.Now()
	g.signal(t, syscall.SIGTERM)
	waitRefused(t, port)
	code := g.waitExit(t, drainTimeout+5*time.Second)
	took := time.Since(sent)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if took < drainTimeout*3/4 {
		t.Errorf("exited %v after SIGTERM with a connection open, want to wait the %v drain timeout", took, drainTimeout)
	}
	// The gateway may forward a close_notify on its way out; what matters is the close.
	if _, closed, err := drain(s.raw, ioTimeout); !closed {
		t.Errorf("connection still open after the gateway exited: %v", err)
	}
}

// waitRefused waits until connecting to port is refused: the listener is closed.
func waitRefused(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr(port), time.Second)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("port %d still accepts connections %v after SIGTERM", port, waitTimeout)
		}
		time.Sleep(pollEvery)
	}
}
