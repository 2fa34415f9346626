package e2e

// What the engine tests (engines_*_test.go) share: each runs one real server of an engine
// (NATS, RabbitMQ, FerretDB, ClickHouse, or Kafka's kfake brokers) behind `snigate serve`,
// published by a DatabaseExposure that a TenantGateway renders from files, and drives it
// with the engine's own client by the exposure's host names. Every test checks the same
// three things besides the engine's own traffic: the client verifies the database's
// certificate by the routed name (verify-full), the certificate seen through snigate is the
// server's own (its serial), and a client without SNI is closed with zero bytes.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// engineApex is the TenantGateway's apex: exposure r of engine e is r.e.example.test and
// r.example.test.
const engineApex = "example.test"

// engineTenant is `snigate serve` with TenantGateway acme of namespace acme and the
// objects a test gives it, on 127.0.0.1. Every listener port of the rendered Gateway (80,
// 443 and the engine's) is bound to a free port (--bind-port): the engine tests need no
// root and run side by side.
type engineTenant struct {
	g    *gateway
	ca   *testutil.CA
	port int // the host port of the engine's listener
}

// startEngineTenant serves the tenant with the objects (exposures, Services) and returns
// when snigate is ready. nativePort is the engine's listener port in the Gateway.
func startEngineTenant(t *testing.T, ca *testutil.CA, nativePort int, objects ...string) *engineTenant {
	t.Helper()
	return startEngineTenantArgs(t, ca, nativePort, nil, objects...)
}

// startEngineTenantArgs is startEngineTenant with more flags for snigate serve.
func startEngineTenantArgs(t *testing.T, ca *testutil.CA, nativePort int, args []string, objects ...string) *engineTenant {
	t.Helper()
	ports := testutil.FreePorts(t, 3)
	wildcard := ca.Issue(t, engineApex, "*."+engineApex)
	dir := configDir(t)
	writeFile(t, dir, "tenant.yaml", fixture.Docs(append([]string{`apiVersion: v1
kind: Namespace
metadata: {name: acme}
---
apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: acme, namespace: acme}
spec:
  apex: ` + engineApex + `
  certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard}}
`, fixture.TLSSecretYAML("acme", "wildcard", wildcard.Cert)}, objects...)...))
	g := startGateway(t, dir, append([]string{"--bind", "127.0.0.1",
		"--bind-port", "80=" + strconv.Itoa(ports[0]), "--bind-port", "443=" + strconv.Itoa(ports[1]),
		"--bind-port", fmt.Sprintf("%d=%d", nativePort, ports[2])}, args...)...)
	return &engineTenant{g: g, ca: ca, port: ports[2]}
}

// exposureYAML is DatabaseExposure name of engine in acme, its backend Service name on
// port.
func exposureYAML(name, engine string, port int) string {
	return fmt.Sprintf(`apiVersion: snigate.dev/v1alpha1
kind: DatabaseExposure
metadata: {name: %s, namespace: acme}
spec:
  engine: %s
  backendRef: {name: %s, port: %d}
`, name, engine, name, port)
}

// engineHostnames are the two names of exposure release of engine: <release>.<engine>.<apex>
// and <release>.<apex>.
func engineHostnames(release, engine string) []string {
	return []string{release + "." + engine + "." + engineApex, release + "." + engineApex}
}

// addr is the gateway's engine port as a client dials it.
func (e *engineTenant) addr() string { return addr(e.port) }

// dial connects to the gateway's engine port whatever address the client asked for: the
// client's host names resolve to the gateway (what DNS does for a real user), and the
// client still verifies the certificate by that name.
func (e *engineTenant) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	d := net.Dialer{Timeout: ioTimeout}
	return d.DialContext(ctx, "tcp", e.addr())
}

// engineStatus is what the engine tests read of an exposure in /status.
type engineStatus struct {
	Name   string `json:"name"`
	Status struct {
		Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
		Hostnames  []string                                         `json:"hostnames"`
		Members    []struct {
			Name, Reason, Certificate string
			Hostnames                 []string
		} `json:"members"`
		Connect string `json:"connect"`
		Server  *struct {
			Serial          string `json:"serial"`
			CoversHostnames bool   `json:"coversHostnames"`
		} `json:"serverCertificate"`
	} `json:"status"`
}

func (x engineStatus) condition(typ string) (status, reason, message string) {
	for _, c := range x.Status.Conditions {
		if c.Type == typ {
			return c.Status, c.Reason, c.Message
		}
	}
	return "", "", ""
}

// waitVerified waits until every exposure in want is Programmed, with CertificateVerified
// Verified by snigate's own probe of a certificate covering its names whose serial is one
// of the certificates given (a bootstrap exposure over several servers may have read any of
// them). It returns the exposures' status by name.
func (e *engineTenant) waitVerified(t *testing.T, want map[string][]*testutil.Cert) map[string]engineStatus {
	t.Helper()
	// The probe runs after the load and its verdict comes with a later render; a slow
	// server's first probe may fail and be retried.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, body, err := e.g.get("/status")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			DatabaseExposures []engineStatus `json:"databaseExposures"`
		}
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatal(err)
		}
		got := map[string]engineStatus{}
		var problems []string
		for _, x := range st.DatabaseExposures {
			got[x.Name] = x
		}
		for name, certs := range want {
			x, ok := got[name]
			if !ok {
				problems = append(problems, "no exposure "+name)
				continue
			}
			if s, r, m := x.condition("Programmed"); s != "True" {
				problems = append(problems, fmt.Sprintf("%s: Programmed %s %s: %s", name, s, r, m))
			}
			var serials []string
			for _, c := range certs {
				serials = append(serials, c.SerialHex())
			}
			if s, r, m := x.condition("CertificateVerified"); s != "True" || r != "Verified" {
				problems = append(problems, fmt.Sprintf("%s: CertificateVerified %s %s: %s", name, s, r, m))
			} else if x.Status.Server == nil || !slices.Contains(serials, x.Status.Server.Serial) || !x.Status.Server.CoversHostnames {
				problems = append(problems, fmt.Sprintf("%s: serverCertificate %+v, want a serial of %v covering the names", name, x.Status.Server, serials))
			}
		}
		if len(problems) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status: %s\n%s", strings.Join(problems, "; "), body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// peerRecorder records the certificate a client verified: put its VerifyConnection in the
// client's tls.Config (the client library's own verification by name still runs first).
type peerRecorder struct {
	mu      sync.Mutex
	serials map[string]*big.Int // SNI → the leaf's serial, the last one seen
}

func (p *peerRecorder) config(ca *testutil.CA) *tls.Config {
	// No ServerName: each client library derives it from the host it connects to, as it
	// would for a user; the recorder then shows which name it sent.
	return &tls.Config{RootCAs: ca.Pool(), VerifyConnection: func(cs tls.ConnectionState) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.serials == nil {
			p.serials = map[string]*big.Int{}
		}
		p.serials[cs.ServerName] = cs.PeerCertificates[0].SerialNumber
		return nil
	}}
}

// check fails unless the client verified a certificate with cert's serial for name.
func (p *peerRecorder) check(t *testing.T, name string, cert *testutil.Cert) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	got, ok := p.serials[name]
	switch {
	case !ok:
		names := make([]string, 0, len(p.serials))
		for n := range p.serials {
			names = append(names, n)
		}
		t.Errorf("the client verified no certificate for %s (it sent SNI %q)", name, names)
	case got.Cmp(cert.Serial) != 0:
		t.Errorf("the client verified serial %X for %s, want the server's own %s", got, name, cert.SerialHex())
	}
}

// checkServed checks, for each name, that a TLS handshake through the gateway with that SNI
// verifies the certificate by that name against the CA and that it is cert, by serial.
// The connection ends with close_notify, as clients end theirs: RabbitMQ keeps a
// connection that only half-closes (a bare FIN) open until its 10 s handshake timeout, and
// snigate relays that half-close and waits for the server's side (so its drain on SIGTERM
// waits too).
func (e *engineTenant) checkServed(t *testing.T, cert *testutil.Cert, names ...string) {
	t.Helper()
	for _, name := range names {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", e.addr(), e.ca.ClientConfig(name))
		if err != nil {
			t.Errorf("verify-full of %s through snigate: %v", name, err)
			continue
		}
		peer := conn.ConnectionState().PeerCertificates[0]
		conn.Close()
		if peer.SerialNumber.Cmp(cert.Serial) != 0 {
			t.Errorf("%s: serial %X through snigate, want the server's own %s", name, peer.SerialNumber, cert.SerialHex())
		}
	}
}

// checkNoSNI checks that a TLS client without SNI is closed with zero bytes and counted as
// no_sni; client, when not nil, is the engine's own client connecting by the address (a
// client sends no SNI for an IP literal), which must fail.
func (e *engineTenant) checkNoSNI(t *testing.T, client func() error) {
	t.Helper()
	before := e.g.rejected(t, "no_sni")
	addrRejectedTLS(t, "127.0.0.1", e.port, &tls.Config{InsecureSkipVerify: true})
	want := before + 1
	if client != nil {
		if err := client(); err == nil {
			t.Errorf("the client reached the database by the address, without SNI")
		} else {
			t.Logf("the client by the address (no SNI): %v", err)
		}
		want++
	}
	e.g.waitRejected(t, "no_sni", want)
}
