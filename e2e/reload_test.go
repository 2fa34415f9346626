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
	"github.com/snigate/snigate/internal/testutil/fixture"
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

// Hot rotation of a terminate listener's certificate: when its Secret changes, new
// handshakes get the new certificate within a second of the reload, a connection opened
// before keeps flowing, and a bounded loop of handshakes running through the switch has no
// failure.
func TestCertificateRotation(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	old, renewed := ca.Issue(t, "term.test"), ca.Issue(t, "term.test")
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(terminate("term", port, "term.test", "cert-term")),
		routeYAML("route-term", "term", []string{"term.test"}, to("svc-plain")),
		serviceYAML("svc-plain", startEcho(t, "echo-plain", nil)),
	))
	writeFile(t, dir, "secret.yaml", secretYAML("cert-term", old))
	g := startGateway(t, dir)

	long := dialTLS(t, port, ca.ClientConfig("term.test"))
	if got := long.peerSerial(); got.Cmp(old.Serial) != 0 {
		t.Fatalf("before: serial %X, want the first certificate's", got)
	}
	long.roundTrip("before the rotation\n")

	// Handshakes in a loop across the switch: at most 300, each bounded by ioTimeout.
	type result struct {
		serial string
		err    error
	}
	results := make(chan result, 300)
	stop := make(chan struct{})
	go func() {
		defer close(results)
		for range 300 {
			select {
			case <-stop:
				return
			default:
			}
			s, err := tryTLS(port, ca.ClientConfig("term.test"))
			if err != nil {
				results <- result{err: err}
				continue
			}
			results <- result{serial: fixture.SerialHex(s.peerSerial())}
			s.raw.Close()
		}
	}()

	gen := g.generation(t)
	writeFile(t, dir, "secret.yaml", secretYAML("cert-term", renewed))
	g.waitGeneration(t, gen)
	applied := time.Now()
	deadline := applied.Add(time.Second)
	for {
		s := dialTLS(t, port, ca.ClientConfig("term.test"))
		got := s.peerSerial()
		s.raw.Close()
		if got.Cmp(renewed.Serial) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second after the reload new handshakes still get serial %X", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	var n, failed, seenNew int
	for r := range results {
		n++
		if r.err != nil {
			failed++
			t.Errorf("handshake during the rotation: %v", r.err)
		}
		if r.serial == renewed.SerialHex() {
			seenNew++
		}
	}
	t.Logf("%d handshakes across the rotation, %d failed, %d with the new certificate", n, failed, seenNew)

	long.roundTrip("after the rotation, the old session still flows\n")
	if got := long.peerSerial(); got.Cmp(old.Serial) != 0 {
		t.Errorf("the open connection's certificate changed: %X", got)
	}
	long.finish()
}
