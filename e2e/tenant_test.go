package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// tenantAddr is the loopback address the TenantGateway test binds: its Gateway has the fixed
// ports 80 and 443, which an address of its own keeps apart from anything else on the host.
const tenantAddr = "127.0.0.44"

// A TenantGateway from files, rendered by the real binary and served with real clients: an
// HTTPS app on 443 with the wildcard certificate, a passthrough service on the same port
// whose own certificate reaches the client, PostgreSQL on its own port with verify-full,
// each port an access boundary, no SNI closed with zero bytes, and plain HTTP redirected.
func TestTenantGatewayStandalone(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (the TenantGateway binds ports 80 and 443)", errors.New("not root"))
	}
	dbPsqlBin(t)
	ca := testutil.NewCA(t)
	wildcard := ca.Issue(t, "example.test", "*.example.test")
	vaultCert := ca.Issue(t, "vault.example.test")
	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "orders.pg.example.test"})
	vaultPort := startEcho(t, "vault", vaultCert)
	appPort := startHTTPEcho(t, "app")
	pgPort := testutil.FreePorts(t, 1)[0]

	dir := configDir(t)
	// manifests is the tenant's folder; pgListenerPort replaces the PostgreSQL listener's
	// port, withSecret says whether the wildcard Secret is there.
	manifests := func(pgListenerPort int, withSecret bool) string {
		secret := fixture.TLSSecretYAML("acme", "wildcard", wildcard.Cert)
		if !withSecret {
			secret = "apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n"
		}
		return fixture.Docs(`apiVersion: v1
kind: Namespace
metadata: {name: acme}
`, tenantYAML("{mode: existingSecret, wildcardSecretRef: {name: wildcard}}", pgListenerPort),
			fixture.ServiceYAML("acme", "app", 8080, appPort, "127.0.0.1"),
			fixture.ServiceYAML("acme", "vault", 8200, vaultPort, "127.0.0.1"),
			fixture.ServiceYAML("acme", "orders", 5432, pg.Port, "127.0.0.1"),
			secret)
	}
	writeFile(t, dir, "tenant.yaml", manifests(pgPort, true))
	g := startGateway(t, dir, "--bind", tenantAddr)

	t.Run("status", func(t *testing.T) {
		_, body, err := g.get("/status")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Tenants []struct {
				Name   string `json:"name"`
				Status struct {
					Conditions []struct{ Type, Status, Reason string } `json:"conditions"`
					Listeners  []struct {
						Name  string `json:"name"`
						Ready bool   `json:"ready"`
					} `json:"listeners"`
				} `json:"status"`
			} `json:"tenants"`
		}
		if err := json.Unmarshal(body, &st); err != nil || len(st.Tenants) != 1 {
			t.Fatalf("/status tenants: %v\n%s", err, body)
		}
		ready := false
		for _, c := range st.Tenants[0].Status.Conditions {
			ready = ready || (c.Type == "Ready" && c.Status == "True")
		}
		if !ready || len(st.Tenants[0].Status.Listeners) != 5 {
			t.Errorf("TenantGateway not Ready with 5 listeners: %+v", st.Tenants[0].Status)
		}
	})

	tenantTraffic{addr: tenantAddr, pgPort: pgPort, ca: ca, wildcard: wildcard, vault: vaultCert, pg: pg}.check(t)

	appServed := func(t *testing.T) {
		t.Helper()
		var peer *tls.ConnectionState
		resp, err := addrHTTPClient(tenantAddr, ca, func(cs tls.ConnectionState) { peer = &cs }).Get("https://app.example.test/")
		if err != nil {
			t.Fatalf("the app is no longer served: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || peer.PeerCertificates[0].SerialNumber.Cmp(wildcard.Serial) != 0 {
			t.Fatalf("the app: %d, or not the wildcard certificate", resp.StatusCode)
		}
	}

	t.Run("an invalid TenantGateway is refused and the last good one serves", func(t *testing.T) {
		gen := g.generation(t)
		writeFile(t, dir, "tenant.yaml", manifests(443, true))
		rec := g.waitLog(t, "the reload rejected", 1, func(rec map[string]any, raw string) bool {
			return rec["msg"] == "configuration rejected; still serving the previous one"
		})
		if msg := fmt.Sprint(rec["error"]); !strings.Contains(msg, "tenant.yaml: document 2 (TenantGateway acme/acme): spec.tlsPassthroughListeners[0].port") {
			t.Errorf("error %q does not name the file, the object and the field", msg)
		}
		if g.generation(t) != gen {
			t.Error("the generation moved on a rejected reload")
		}
		appServed(t)
	})

	t.Run("without its wildcard Secret the previous Gateway keeps serving", func(t *testing.T) {
		gen := g.generation(t)
		writeFile(t, dir, "tenant.yaml", manifests(pgPort, false))
		g.waitGeneration(t, gen)
		code, body, err := g.get("/status")
		if err != nil || !strings.Contains(string(body), `"SecretNotFound"`) {
			t.Errorf("/status (%d, %v) does not say SecretNotFound:\n%s", code, err, body)
		}
		appServed(t)
		r := dbPsql(t, pg.ConnString(tenantAddr, pgPort), "select 1")
		if r.err != nil {
			t.Errorf("the database is no longer reachable: %v", r)
		}
	})
}

// tenantTraffic is what both TenantGateway end-to-end tests (files and cluster) check with
// real clients once the rendered Gateway serves on addr: the app over HTTPS with the
// wildcard certificate, the passthrough service's own certificate on 443, PostgreSQL with
// verify-full on its own port, each port an access boundary, no SNI closed with zero bytes,
// and plain HTTP redirected.
type tenantTraffic struct {
	addr            string
	pgPort          int
	ca              *testutil.CA
	wildcard, vault *testutil.Cert
	pg              *testutil.Postgres
}

func (tc tenantTraffic) check(t *testing.T) {
	t.Helper()
	t.Run("HTTPS app with the wildcard certificate", func(t *testing.T) {
		var peer *tls.ConnectionState
		c := addrHTTPClient(tc.addr, tc.ca, func(cs tls.ConnectionState) { peer = &cs })
		resp, err := c.Get("https://app.example.test/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name":"app"`) {
			t.Fatalf("GET: %d %s", resp.StatusCode, body)
		}
		if peer == nil || peer.PeerCertificates[0].SerialNumber.Cmp(tc.wildcard.Serial) != 0 {
			t.Errorf("the app was not served with the wildcard certificate")
		}
	})

	t.Run("curl gets the app with the wildcard certificate", func(t *testing.T) {
		curl := testutil.Binary(t, "curl", "/usr/bin")
		r := dbRun(t, curl, "-sS", "--max-time", "10", "--cacert", tc.ca.File,
			"--resolve", "app.example.test:443:"+tc.addr, "https://app.example.test/")
		if r.err != nil || !strings.Contains(r.stdout, `"name":"app"`) {
			t.Fatalf("curl: %v", r)
		}
	})

	t.Run("openssl through tls-vault sees the backend's own serial", func(t *testing.T) {
		r := dbRun(t, openssl(t), "s_client", "-connect", net.JoinHostPort(tc.addr, "443"), "-servername", "vault.example.test",
			"-CAfile", tc.ca.File, "-verify_return_error", "-brief")
		peer := dbRun(t, "bash", "-c", fmt.Sprintf("openssl s_client -connect %s -servername vault.example.test </dev/null 2>/dev/null | openssl x509 -noout -serial",
			net.JoinHostPort(tc.addr, "443")))
		if r.err != nil || strings.TrimSpace(peer.stdout) != "serial="+tc.vault.SerialHex() {
			t.Fatalf("openssl s_client: %v\nserial: %v, want %s", r, peer, tc.vault.SerialHex())
		}
	})

	t.Run("passthrough on 443 reaches the backend's own certificate", func(t *testing.T) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(tc.addr, "443"),
			&tls.Config{ServerName: "vault.example.test", RootCAs: tc.ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(tc.vault.Serial) != 0 {
			t.Errorf("serial %x, want the backend's %x", got, tc.vault.Serial)
		}
	})

	t.Run("psql verify-full on the database's own port", func(t *testing.T) {
		// The instance's name, not just "select 1": the answer comes from that very server.
		r := dbPsql(t, tc.pg.ConnString(tc.addr, tc.pgPort), "select name from instance")
		if r.err != nil || strings.TrimSpace(r.stdout) != "orders.pg.example.test" {
			t.Fatalf("psql through the tenant gateway: %v", r)
		}
	})

	t.Run("each port is an access boundary", func(t *testing.T) {
		// The database's name on 443 is taken by the HTTPS listener *.example.test and
		// answered with the wildcard certificate: it never reaches PostgreSQL.
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(tc.addr, "443"),
			&tls.Config{ServerName: "orders.pg.example.test", InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		got := c.ConnectionState().PeerCertificates[0].SerialNumber
		c.Close()
		if got.Cmp(tc.wildcard.Serial) != 0 || got.Cmp(tc.pg.Cert.Serial) == 0 {
			t.Errorf("the database's name on 443 got serial %x, want the gateway's wildcard %x", got, tc.wildcard.Serial)
		}
		addrRejectedTLS(t, tc.addr, tc.pgPort, &tls.Config{ServerName: "app.example.test", RootCAs: tc.ca.Pool()})
		addrRejectedTLS(t, tc.addr, tc.pgPort, &tls.Config{ServerName: "vault.example.test", RootCAs: tc.ca.Pool()})
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		for _, port := range []int{443, tc.pgPort} {
			addrRejectedTLS(t, tc.addr, port, &tls.Config{InsecureSkipVerify: true})
		}
	})

	t.Run("plain HTTP redirects to https", func(t *testing.T) {
		c := addrHTTPClient(tc.addr, tc.ca, nil)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.Get("http://app.example.test/path?q=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "https://app.example.test/path?q=1" {
			t.Errorf("GET http://: %d Location %q, want 301 to https", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
}

// addrHTTPClient dials addr whatever the URL's host, trusting ca.
func addrHTTPClient(addr string, ca *testutil.CA, onTLS func(tls.ConnectionState)) *http.Client {
	d := &net.Dialer{Timeout: ioTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(a)
			return d.DialContext(ctx, network, net.JoinHostPort(addr, port))
		},
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), VerifyConnection: func(cs tls.ConnectionState) error {
			if onTLS != nil {
				onTLS(cs)
			}
			return nil
		}},
	}
	return &http.Client{Transport: tr, Timeout: 2 * ioTimeout}
}

// addrRejectedTLS expects a TLS handshake to addr:port to end with zero bytes read.
func addrRejectedTLS(t *testing.T, addr string, port int, cfg *tls.Config) {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(port)), ioTimeout)
	if err != nil {
		t.Fatalf("connect %s:%d: %v (rejection must accept, then close)", addr, port, err)
	}
	defer c.Close()
	dbTLSNoBytes(t, c, cfg)
}

// tenantYAML is the tenant of both TenantGateway end-to-end tests: TenantGateway acme
// (apex example.test, certificates as given, the passthrough service vault on 443 and the
// PostgreSQL listener pg on pgListenerPort) with its HTTPRoute app and TLSRoutes vault and
// orders.
func tenantYAML(certificates string, pgListenerPort int) string {
	return fixture.Docs(fmt.Sprintf(`apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: acme, namespace: acme}
spec:
  apex: example.test
  certificates: %s
  tlsPassthroughServices: [vault]
  tlsPassthroughListeners:
  - {name: pg, port: %d, hostname: "*.pg.example.test"}
`, certificates, pgListenerPort), `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: acme}
spec:
  parentRefs: [{name: acme}]
  hostnames: [app.example.test]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
`, `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: vault, namespace: acme}
spec:
  parentRefs: [{name: acme, sectionName: tls-vault}]
  hostnames: [vault.example.test]
  rules: [{backendRefs: [{name: vault, port: 8200}]}]
`, `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: orders, namespace: acme}
spec:
  parentRefs: [{name: acme, sectionName: tls-pg}]
  hostnames: [orders.pg.example.test]
  rules: [{backendRefs: [{name: orders, port: 5432}]}]
`)
}
