package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/source/cluster"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// `snigate controller` with its local proxy outlives an API server outage: the process
// loses its leader Lease while the API server is unreachable (for a minute), stops writing
// status, and keeps serving its last configuration — no new connection fails, a held session
// goes on — then wins the Lease back when the API server returns, writes nothing that did
// not change, and serves changes made after. Then a leader hand-over: a second replica serves all along
// while the first stops, wins the Lease, and writes only what changes.
func TestControllerOutlivesAPIServerOutage(t *testing.T) {
	env, cl, ca, port := echoCluster(t)
	// The controller reaches the API server through a link the test cuts.
	link, linked, kubeconfig := linkedKubeconfig(t, env)
	g := startSnigate(t, "", "controller", "--kubeconfig", linked, "--bind", "127.0.0.1",
		"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	kubetest.Eventually(t, clusterWait, "route a served", func() error { return echoOnce(addr, "a.example.test", ca) })
	kubetest.Eventually(t, clusterWait, "route a Accepted (the leader writes status)", routeAccepted(cl, "a"))
	won := func(rec map[string]any, _ string) bool {
		return rec["msg"] == "won the leader Lease: writing status and applying tenant objects"
	}
	g.waitLog(t, "the first term", 1, won)

	held := dialEcho(t, addr, "a.example.test", ca)
	defer held.Close()
	traffic := startLoad(addr, "a.example.test", ca)
	writesBefore := g.settledStatusWrites(t)
	link.Down()
	down := time.Now()
	g.waitLog(t, "the Lease lost while the API server is unreachable", 1, func(rec map[string]any, _ string) bool {
		return strings.HasPrefix(fmt.Sprint(rec["msg"]), "lost the leader Lease")
	})
	t.Logf("lease lost %s into the outage", time.Since(down).Round(100*time.Millisecond))
	// A minute in all, the replica campaigning meanwhile; every 5 s the process, its
	// readiness and the held session are checked.
	for time.Since(down) < time.Minute {
		time.Sleep(5 * time.Second)
		select {
		case <-g.exited:
			t.Fatalf("the controller exited during the outage: %v", g.exitErr)
		default:
		}
		if code, _, err := g.get("/readyz"); err != nil || code != 200 {
			t.Errorf("/readyz %d, %v %s into the outage: the proxy serves its last configuration", code, err, time.Since(down).Round(time.Second))
		}
		if err := roundTrip(held, "during the outage"); err != nil {
			t.Errorf("held session %s into the outage: %v", time.Since(down).Round(time.Second), err)
		}
	}
	if n := g.statusWrites(t); n != writesBefore {
		t.Errorf("%v status writes during the outage", n-writesBefore)
	}
	outage := time.Since(down)
	link.Up()
	g.waitLog(t, "the second term after the API server returned", 2, won)
	// Nothing changed meanwhile: the new term reads, and writes nothing.
	time.Sleep(2 * time.Second)
	if n := g.statusWrites(t); n != writesBefore {
		t.Errorf("%v status writes after the Lease was won back with nothing changed, want 0", n-writesBefore)
	}
	// A change after the outage is served and its status written.
	addRoute(t, cl, ca, addr, "b", "after the outage")
	if err := roundTrip(held, "after the outage"); err != nil {
		t.Errorf("held session: %v", err)
	}
	ok, failed, firstErr := traffic.stop()
	t.Logf("outage of %s: %d new connections succeeded, %d failed; %v status writes after it",
		outage.Round(100*time.Millisecond), ok, failed, g.statusWrites(t)-writesBefore)
	if failed != 0 {
		t.Errorf("%d new connections failed (first: %v)", failed, firstErr)
	}
	if ok < 100 || ok+failed >= loadMax {
		t.Errorf("%d connections made: the load loop did not run through the outage", ok+failed)
	}

	// A hand-over: a second replica (its proxy on 127.0.0.2) serves all along; the first
	// stops as a rollout stops it (SIGTERM, releasing the Lease), the second wins the Lease
	// and writes the status of what changes after.
	g2 := startSnigate(t, "", "controller", "--kubeconfig", kubeconfig, "--bind", "127.0.0.2",
		"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms")
	addr2 := net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
	kubetest.Eventually(t, clusterWait, "the second replica serving", func() error { return echoOnce(addr2, "b.example.test", ca) })
	load2 := startLoad(addr2, "a.example.test", ca)
	held2 := dialEcho(t, addr2, "a.example.test", ca)
	defer held2.Close()
	if n := g2.statusWrites(t); n != 0 {
		t.Errorf("the follower wrote status %v times", n)
	}
	held.Close() // the first replica would drain it until its deadline
	g.stop()
	g2.waitLog(t, "the second replica winning the Lease", 1, won)
	// Its Gateway status differs in one thing: its proxy's address (127.0.0.2), which it
	// writes; nothing else.
	g2.settledStatusWrites(t)
	if n := g2.statusWrites(t) - g2.statusWritesOf(t, "Gateway"); n != 0 {
		t.Errorf("%v status writes other than the Gateway's by the new leader with nothing changed, want 0", n)
	}
	addRoute(t, cl, ca, addr2, "c", "after the hand-over (its status by the new leader)")
	if err := roundTrip(held2, "after the hand-over"); err != nil {
		t.Errorf("held session on the second replica: %v", err)
	}
	ok, failed, firstErr = load2.stop()
	t.Logf("hand-over: %d new connections succeeded, %d failed; %v status writes by the new leader",
		ok, failed, g2.statusWrites(t))
	if failed != 0 {
		t.Errorf("%d new connections failed during the hand-over (first: %v)", failed, firstErr)
	}
}

// linkedKubeconfig writes two kubeconfigs of a cluster admin of env: direct, and through a
// link to the API server that the test can cut (an outage as the processes using it see it).
func linkedKubeconfig(t *testing.T, env *envtest.Environment) (link *testutil.Link, linked, direct string) {
	t.Helper()
	base, _, err := rest.DefaultServerUrlFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	link = testutil.NewLink(t, base.Host)
	direct = writeKubeconfig(t, env)
	kc, err := clientcmd.LoadFromFile(direct)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + link.Addr()
	}
	linked = filepath.Join(t.TempDir(), "kubeconfig-linked")
	if err := clientcmd.WriteToFile(*kc, linked); err != nil {
		t.Fatal(err)
	}
	return link, linked, direct
}

// load makes a new connection and one round trip through the gateway every 20 ms (at most
// loadMax of them) until stopped.
type load struct {
	done       chan struct{}
	wg         sync.WaitGroup
	ok, failed atomic.Int64
	first      atomic.Pointer[error] // errors differ in type: an atomic.Value would panic
}

// loadMax bounds a load loop: 20 ms apart, two minutes or more.
const loadMax = 6000

func startLoad(addr, sni string, ca *testutil.CA) *load {
	l := &load{done: make(chan struct{})}
	l.wg.Go(func() {
		for i := 0; i < loadMax; i++ {
			select {
			case <-l.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := echoOnce(addr, sni, ca); err != nil {
				l.failed.Add(1)
				l.first.CompareAndSwap(nil, &err)
			} else {
				l.ok.Add(1)
			}
		}
	})
	return l
}

// stop ends the loop and returns its counts and first error.
func (l *load) stop() (ok, failed int64, first any) {
	close(l.done)
	l.wg.Wait()
	if e := l.first.Load(); e != nil {
		first = *e
	}
	return l.ok.Load(), l.failed.Load(), first
}

// echoCluster starts an API server holding a Gateway apps/edge (one TLS passthrough
// listener on a free port, *.example.test) and the TLSRoute a.example.test to the Service
// db: an echo backend in a network namespace, its certificate for a, b, c and d.example.test.
func echoCluster(t *testing.T) (*envtest.Environment, client.Client, *testutil.CA, int) {
	t.Helper()
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (network namespaces for the backend)", errors.New("not root"))
	}
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: kubetest.StandardCRDs(t)})
	sch, err := cluster.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(env.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	ca := testutil.NewCA(t)
	cert := ca.Issue(t, "a.example.test", "b.example.test", "c.example.test", "d.example.test")
	host := testutil.NetnsHost(t, "outage")
	const backendPort = 9443
	certFile, keyFile := cert.WriteFiles(t, t.TempDir())
	host.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(host.IP.String(), strconv.Itoa(backendPort)),
		"--name", "db", "--cert", certFile, "--key", keyFile)
	waitListening(t, net.JoinHostPort(host.IP.String(), strconv.Itoa(backendPort)))
	port := testutil.FreePort(t)
	apply(t, cl, fixture.Docs(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
`, `apiVersion: v1
kind: Namespace
metadata: {name: apps}
`, fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: apps}
spec:
  gatewayClassName: snigate
  listeners:
  - {name: tls, protocol: TLS, port: %d, hostname: "*.example.test", tls: {mode: Passthrough}}
`, port), outageRoute("a"), fixture.ServiceYAML("apps", "db", 443, backendPort, host.IP.String())))

	return env, cl, ca, port
}

// outageRoute is a TLSRoute <name>.example.test to the Service db on the Gateway apps/edge.
func outageRoute(name string) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: %s, namespace: apps}
spec:
  parentRefs: [{name: edge}]
  hostnames: [%s.example.test]
  rules: [{backendRefs: [{name: db, port: 443}]}]
`, name, name)
}

// addRoute creates outageRoute(name) and waits until it is served through addr and its
// status says Accepted; when says at which point of the test, for its messages.
func addRoute(t *testing.T, cl client.Client, ca *testutil.CA, addr, name, when string) {
	t.Helper()
	apply(t, cl, outageRoute(name))
	kubetest.Eventually(t, clusterWait, "route "+name+" served "+when, func() error { return echoOnce(addr, name+".example.test", ca) })
	kubetest.Eventually(t, clusterWait, "route "+name+" Accepted "+when, routeAccepted(cl, name))
}

// routeAccepted checks that the TLSRoute apps/<name> is Accepted by the Gateway.
func routeAccepted(cl client.Client, name string) func() error {
	return func() error {
		var r gwv1.TLSRoute
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: name}, &r); err != nil {
			return err
		}
		for _, p := range r.Status.Parents {
			for _, c := range p.Conditions {
				if c.Type == "Accepted" && c.Status == "True" {
					return nil
				}
			}
		}
		return fmt.Errorf("not Accepted: %+v", r.Status.Parents)
	}
}

// statusWrites is the controller's snigate_status_writes_total, summed over kinds.
func (g *gateway) statusWrites(t *testing.T) float64 {
	t.Helper()
	code, body, err := g.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	var n float64
	for k, v := range samples(string(body)) {
		if strings.HasPrefix(k, "snigate_status_writes_total") {
			n += v
		}
	}
	return n
}

// statusWritesOf is the controller's snigate_status_writes_total of one kind.
func (g *gateway) statusWritesOf(t *testing.T, kind string) float64 {
	t.Helper()
	_, body, err := g.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return samples(string(body))[`snigate_status_writes_total{kind="`+kind+`"}`]
}

// settledStatusWrites waits until snigate_status_writes_total has not moved for a second
// (the writes of the last change done) and returns it.
func (g *gateway) settledStatusWrites(t *testing.T) float64 {
	t.Helper()
	last := g.statusWrites(t)
	for deadline := time.Now().Add(clusterWait); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		n := g.statusWrites(t)
		if n == last {
			return n
		}
		last = n
	}
	t.Fatalf("status writes never settled (%v)", last)
	return 0
}

// echoConn is a TLS session with the echo backend, its greeting read.
type echoConn struct {
	*tls.Conn
	r *bufio.Reader
}

// dialEcho connects through the gateway with sni, verifying the backend's certificate by
// that name, and reads the echo's greeting.
func dialEcho(t *testing.T, addr, sni string, ca *testutil.CA) *echoConn {
	t.Helper()
	c, err := dialEchoErr(addr, sni, ca)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dialEchoErr(addr, sni string, ca *testutil.CA) (*echoConn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", addr, &tls.Config{ServerName: sni, RootCAs: ca.Pool()})
	if err != nil {
		return nil, err
	}
	ec := &echoConn{Conn: c, r: bufio.NewReader(c)}
	c.SetReadDeadline(time.Now().Add(ioTimeout))
	if _, err := ec.r.ReadString('\n'); err != nil {
		c.Close()
		return nil, fmt.Errorf("greeting: %w", err)
	}
	return ec, nil
}

// roundTrip sends a line and expects it back.
func roundTrip(c *echoConn, line string) error {
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echoed %q, want %q", got, line)
	}
	return nil
}

// echoOnce makes one connection through the gateway and one round trip.
func echoOnce(addr, sni string, ca *testutil.CA) error {
	c, err := dialEchoErr(addr, sni, ca)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, "ping")
}

// A data plane told to stop (a rollout's SIGTERM) refuses no one (stopsWithoutRefusing).
// `snigate dataplane` and `snigate controller` stop alike (cmd/snigate/shutdown.go); the
// controller with its proxy is what this test can start without a kubelet.
func TestControllerStopsWithoutRefusing(t *testing.T) {
	env, _, ca, port := echoCluster(t)
	const grace, drain = 2 * time.Second, 3 * time.Second
	g := startSnigate(t, "", "controller", "--kubeconfig", writeKubeconfig(t, env), "--bind", "127.0.0.1",
		"--leader-elect=false", "--shutdown-grace", grace.String(), "--drain-timeout", drain.String())
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	kubetest.Eventually(t, clusterWait, "route a served", func() error { return echoOnce(addr, "a.example.test", ca) })
	stopsWithoutRefusing(t, g, addr, "a.example.test", ca, grace, drain)
}
