package e2e

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
)

// wildcardAddr is the loopback address of the cross-namespace wildcard test (ports 80, 443).
const wildcardAddr = "127.0.0.47"

// One copy of a wildcard key for many tenants: a TenantGateway names the Secret in the
// platform namespace, a ReferenceGrant there allows it, and its HTTPS app is served with it.
// Without the grant it is refused (RefNotPermitted); removing the grant stops new
// handshakes from getting it, and putting it back serves it again.
func TestCrossNamespaceWildcard(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (the TenantGateway binds ports 80 and 443)", errors.New("not root"))
	}
	ca := testutil.NewCA(t)
	wildcard := ca.Issue(t, "example.test", "*.example.test")
	appPort := startHTTPEcho(t, "app")
	dir := configDir(t)
	writeFile(t, dir, "tenant.yaml", fixture.Docs(`apiVersion: v1
kind: Namespace
metadata: {name: acme}
---
apiVersion: v1
kind: Namespace
metadata: {name: platform}
---
apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: acme, namespace: acme}
spec:
  apex: example.test
  certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard, namespace: platform}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: acme}
spec:
  parentRefs: [{name: acme}]
  hostnames: [app.example.test]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
`, fixture.ServiceYAML("acme", "app", 8080, appPort, "127.0.0.1"),
		fixture.TLSSecretYAML("platform", "wildcard", wildcard.Cert)))
	const grant = `apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: acme-uses-the-wildcard, namespace: platform}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: acme}]
  to: [{group: "", kind: Secret, name: wildcard}]
`
	writeFile(t, dir, "grant.yaml", grant)
	g := startGateway(t, dir, "--bind", wildcardAddr)

	served := func(t *testing.T) {
		t.Helper()
		var peer *tls.ConnectionState
		resp, err := addrHTTPClient(wildcardAddr, ca, func(cs tls.ConnectionState) { peer = &cs }).Get("https://app.example.test/")
		if err != nil {
			t.Fatalf("the app with the platform's wildcard: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || peer.PeerCertificates[0].SerialNumber.Cmp(wildcard.Serial) != 0 {
			t.Fatalf("the app: %d, or not the wildcard certificate", resp.StatusCode)
		}
	}
	t.Run("served with the grant", served)

	t.Run("the grant's removal stops new handshakes, and says why", func(t *testing.T) {
		gen := g.generation(t)
		if err := os.Remove(dir + "/grant.yaml"); err != nil {
			t.Fatal(err)
		}
		g.waitGeneration(t, gen)
		// No listener may serve it: with no other listener on 443 the port closes; either
		// way no handshake gets the certificate.
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(wildcardAddr, "443"), ioTimeout); err == nil {
			dbTLSNoBytes(t, c, &tls.Config{ServerName: "app.example.test", RootCAs: ca.Pool()})
			c.Close()
		}
		_, body, err := g.get("/status")
		if err != nil || !strings.Contains(string(body), `"RefNotPermitted"`) {
			t.Errorf("/status does not say RefNotPermitted (%v):\n%s", err, body)
		}
	})

	t.Run("the grant back: served again", func(t *testing.T) {
		gen := g.generation(t)
		writeFile(t, dir, "grant.yaml", grant)
		g.waitGeneration(t, gen)
		served(t)
	})
}
