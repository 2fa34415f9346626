package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/acmetest"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// certWait bounds a certificate's issuance: cert-manager's key, request, order, challenge,
// self check and Pebble's validation follow each other, each a reconcile or two.
const certWait = 120 * time.Second

var (
	certificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}
	challengeGVK   = schema.GroupVersionKind{Group: "acme.cert-manager.io", Version: "v1", Kind: "Challenge"}
)

// certCluster is a real API server with cert-manager, Pebble, the solver Pods' stand-in
// kubelet and snigate's controller serving on addresses of 127.0.3.0/24.
type certCluster struct {
	cl     client.Client
	dns    *acmetest.ChallSrv
	pebble *acmetest.Pebble
}

func startCertCluster(t *testing.T) *certCluster {
	t.Helper()
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (network namespaces, and the Gateways bind ports 80 and 443)", errors.New("not root"))
	}
	acmetest.RequireTools(t)
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	crds = append(crds, kubetest.AllCertManagerCRDs(t)...)
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: crds, GarbageCollector: true})
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &certCluster{cl: cl, dns: acmetest.StartChallSrv(t)}
	c.pebble = acmetest.StartPebble(t, c.dns)
	acmetest.StartCertManager(t, env, c.dns)
	acmetest.RunSolverPods(t, env.Config)
	apply(t, cl, fixture.Docs(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
`, `apiVersion: v1
kind: Namespace
metadata: {name: `+acmetest.ClusterResourceNamespace+`}
`))
	startSnigate(t, "", "controller", "--kubeconfig", writeKubeconfig(t, env), "--leader-elect=false",
		"--local-addresses", "127.0.3.0/24")
	return c
}

// gatewayAddress waits for the Gateway's first status address.
func (c *certCluster) gatewayAddress(t *testing.T, ns, name string) string {
	t.Helper()
	return waitGatewayAddress(t, c.cl, ns, name, nil)
}

// waitGatewayAddress waits until Gateway ns/name has a status address (and check, when
// given, passes on it) and returns the first.
func waitGatewayAddress(t *testing.T, cl client.Client, ns, name string, check func(gw *unstructured.Unstructured) error) string {
	t.Helper()
	var addr string
	kubetest.Eventually(t, clusterWait, "Gateway "+ns+"/"+name+" has an address", func() error {
		gw := &unstructured.Unstructured{}
		gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
		if err := cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, gw); err != nil {
			return err
		}
		addrs, _, _ := unstructured.NestedSlice(gw.Object, "status", "addresses")
		if len(addrs) == 0 {
			return errors.New("no status.addresses yet")
		}
		a, _ := addrs[0].(map[string]any)
		addr, _ = a["value"].(string)
		if check != nil {
			return check(gw)
		}
		return nil
	})
	return addr
}

// certificateFor waits for the Certificate whose dnsNames hold name to be Ready, and returns
// its Secret's leaf certificate.
func (c *certCluster) certificateFor(t *testing.T, ns, name string, onWait func()) (*unstructured.Unstructured, *x509.Certificate) {
	t.Helper()
	var found *unstructured.Unstructured
	kubetest.Eventually(t, certWait, "a Ready Certificate for "+name, func() error {
		if onWait != nil {
			onWait()
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(certificateGVK)
		if err := c.cl.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		for i := range list.Items {
			crt := &list.Items[i]
			names, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames")
			for _, n := range names {
				if n == name {
					if !conditionTrue(crt, "Ready") {
						return fmt.Errorf("Certificate %s not Ready: %v", crt.GetName(), crt.Object["status"])
					}
					found = crt
					return nil
				}
			}
		}
		return fmt.Errorf("no Certificate names %s yet", name)
	})
	secret, _, _ := unstructured.NestedString(found.Object, "spec", "secretName")
	return found, c.secretLeaf(t, ns, secret)
}

func (c *certCluster) secretLeaf(t *testing.T, ns, name string) *x509.Certificate {
	t.Helper()
	leaf := c.secretLeafMaybe(ns, name)
	if leaf == nil {
		t.Fatalf("Secret %s/%s: no readable certificate", ns, name)
	}
	return leaf
}

func conditionTrue(obj *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// curlHTTPS runs curl for https://host/ resolved to addr, verifying against caFile, and
// returns its output.
func curlHTTPS(t *testing.T, addr, host, caFile string) string {
	t.Helper()
	out, err := exec.Command("curl", "-sS", "--max-time", "10", "--cacert", caFile,
		"--resolve", host+":443:"+addr, "https://"+host+"/").CombinedOutput()
	if err != nil {
		t.Fatalf("curl https://%s/ at %s: %v\n%s", host, addr, err, out)
	}
	return string(out)
}

// servedSerial is the serial of the certificate addr:443 serves for host, verified against
// roots; nil roots: not verified (before the issued certificate is served, the listener may
// have none a root verifies).
func servedSerial(addr, host string, roots *x509.CertPool) (*big.Int, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(addr, "443"),
		&tls.Config{ServerName: host, RootCAs: roots, InsecureSkipVerify: roots == nil})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// HTTP-01 for real: a TenantGateway in http01 mode with acme.server = Pebble. cert-manager
// issues each HTTPRoute hostname's certificate through the rendered Issuer, its solver Pod
// answers Pebble's challenge through snigate's own http listener (where every other path
// keeps its 301), and the HTTPS listener serves the certificate. A hostname added later gets
// its own listener and certificate the same way; a renewal changes the served serial with
// no failed handshake and no dropped connection. Then dns01 through an issuerRef to a CA
// ClusterIssuer: one wildcard certificate, served for two hostnames under the apex.
func TestCertificatesCluster(t *testing.T) {
	c := startCertCluster(t)
	ctx := context.Background()
	appHost := testutil.NetnsHost(t, "app")
	appHost.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(appHost.IP.String(), "8080"), "--name", "app", "--http")
	waitListening(t, net.JoinHostPort(appHost.IP.String(), "8080"))
	apply(t, c.cl, fixture.Docs(`apiVersion: v1
kind: Namespace
metadata: {name: acme}
`, fmt.Sprintf(`apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: acme, namespace: acme}
spec:
  apex: acme.test
  certificates:
    mode: http01
    acme: {server: %q, email: ops@acme.test, caBundle: %s}
`, c.pebble.Directory, base64.StdEncoding.EncodeToString(c.pebble.ServerCA)),
		httpRouteYAML("acme", "app", "app.acme.test"),
		fixture.ServiceYAML("acme", "app", 8080, 8080, appHost.IP.String())))

	addr := c.gatewayAddress(t, "acme", "acme")
	c.dns.SetIPv4(t, addr)
	roots := c.pebble.RootPool(t)
	rootsFile := writeTemp(t, "pebble-roots.pem", c.pebble.Roots(t))

	// While a challenge is out, its path answers with the key through the http listener and
	// any other path still redirects: the solver route is more specific than the redirect.
	var challengeChecked bool
	checkChallenge := func(t *testing.T) func() {
		return func() {
			if challengeChecked {
				return
			}
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(challengeGVK)
			if err := c.cl.List(ctx, list); err != nil {
				return
			}
			for _, ch := range list.Items {
				if p, _, _ := unstructured.NestedBool(ch.Object, "status", "presented"); !p {
					continue
				}
				token, _, _ := unstructured.NestedString(ch.Object, "spec", "token")
				key, _, _ := unstructured.NestedString(ch.Object, "spec", "key")
				domain, _, _ := unstructured.NestedString(ch.Object, "spec", "dnsName")
				code, body, err := plainGET(addr, domain, "/.well-known/acme-challenge/"+token)
				if err != nil || code != http.StatusOK {
					continue // the route may not be programmed yet, or the challenge just ended
				}
				if body != key {
					t.Errorf("challenge path answered %q, want the key %q", body, key)
				}
				if code, _, err := plainGET(addr, domain, "/anything"); err != nil || code != http.StatusMovedPermanently {
					t.Errorf("another path during the challenge: %d %v, want the 301", code, err)
				}
				challengeChecked = true
				return
			}
		}
	}

	var appCert *x509.Certificate
	var appCrt *unstructured.Unstructured
	t.Run("http01 issues app.acme.test through snigate's http listener", func(t *testing.T) {
		appCrt, appCert = c.certificateFor(t, "acme", "app.acme.test", checkChallenge(t))
		if !challengeChecked {
			t.Error("never saw a presented challenge answered through the http listener")
		}
		if _, err := appCert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "app.acme.test", Intermediates: intermediates(t, c, "acme", appCrt)}); err != nil {
			t.Errorf("the issued certificate does not chain to Pebble's root: %v", err)
		}
		kubetest.Eventually(t, clusterWait, "app.acme.test served with the issued certificate", func() error {
			s, err := servedSerial(addr, "app.acme.test", nil)
			if err != nil {
				return err
			}
			if s.Cmp(appCert.SerialNumber) != 0 {
				return fmt.Errorf("serving serial %x, want %x", s, appCert.SerialNumber)
			}
			return nil
		})
		if out := curlHTTPS(t, addr, "app.acme.test", rootsFile); !strings.Contains(out, "app") {
			t.Errorf("curl https://app.acme.test/ verifying Pebble's root: %q", out)
		}
		if code, _, err := plainGET(addr, "app.acme.test", "/path"); err != nil || code != http.StatusMovedPermanently {
			t.Errorf("GET http://app.acme.test/path: %d %v, want 301", code, err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("a hostname added later gets its own listener and certificate", func(t *testing.T) {
		challengeChecked = false
		apply(t, c.cl, httpRouteYAML("acme", "shop", "shop.acme.test"))
		_, shop := c.certificateFor(t, "acme", "shop.acme.test", checkChallenge(t))
		if shop.SerialNumber.Cmp(appCert.SerialNumber) == 0 {
			t.Fatal("shop.acme.test got app's certificate")
		}
		kubetest.Eventually(t, clusterWait, "shop.acme.test served", func() error {
			s, err := servedSerial(addr, "shop.acme.test", roots)
			if err != nil {
				return err
			}
			if s.Cmp(shop.SerialNumber) != 0 {
				return fmt.Errorf("serving serial %x, want %x", s, shop.SerialNumber)
			}
			return nil
		})
		if out := curlHTTPS(t, addr, "shop.acme.test", rootsFile); !strings.Contains(out, "app") {
			t.Errorf("curl https://shop.acme.test/: %q", out)
		}
	})

	t.Run("renewal: new serial, the open connection flows, no handshake fails", func(t *testing.T) {
		held := openKeepAlive(t, addr, "app.acme.test", roots)
		defer held.Close()
		before := held.serial
		stop := make(chan struct{})
		var mu sync.Mutex
		var handshakes, failures int
		var lastErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Bounded: at most 400 handshakes, at most one every 50 ms.
			for i := 0; i < 400; i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				_, err := servedSerial(addr, "app.acme.test", roots)
				mu.Lock()
				handshakes++
				if err != nil {
					failures++
					lastErr = err
				}
				mu.Unlock()
			}
		}()
		// cert-manager's manual reissue trigger, what `cmctl renew` sets.
		renew(t, c, "acme", appCrt.GetName())
		var renewed *x509.Certificate
		kubetest.Eventually(t, certWait, "the renewed certificate served", func() error {
			if err := held.get(); err != nil {
				return fmt.Errorf("the held connection broke: %w", err)
			}
			leaf := c.secretLeafMaybe("acme", mustString(appCrt, "spec", "secretName"))
			if leaf == nil || leaf.SerialNumber.Cmp(before) == 0 {
				return errors.New("not reissued yet")
			}
			renewed = leaf
			s, err := servedSerial(addr, "app.acme.test", roots)
			if err != nil {
				return err
			}
			if s.Cmp(leaf.SerialNumber) != 0 {
				return fmt.Errorf("still serving %x", s)
			}
			return nil
		})
		// A few more handshakes after the switch, then stop the loop.
		time.Sleep(500 * time.Millisecond)
		close(stop)
		<-done
		if err := held.get(); err != nil {
			t.Errorf("the connection opened before the renewal broke after it: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("renewal: serial %x → %x; %d handshakes during the switch, %d failed; the held connection made %d requests",
			before, renewed.SerialNumber, handshakes, failures, held.requests)
		if failures != 0 || handshakes == 0 {
			t.Errorf("%d of %d handshakes failed during the renewal (last: %v)", failures, handshakes, lastErr)
		}
	})

	t.Run("dns01 through an issuerRef to a CA ClusterIssuer: one wildcard for two hostnames", func(t *testing.T) {
		ca := testutil.NewCA(t)
		beta := testutil.NetnsHost(t, "beta")
		beta.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(beta.IP.String(), "8080"), "--name", "beta", "--http")
		waitListening(t, net.JoinHostPort(beta.IP.String(), "8080"))
		apply(t, c.cl, fixture.Docs(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: test-ca, namespace: %s}
type: kubernetes.io/tls
data: {tls.crt: %s, tls.key: %s}
`, acmetest.ClusterResourceNamespace, base64.StdEncoding.EncodeToString(ca.CertPEM), base64.StdEncoding.EncodeToString(caKeyPEM(t, ca))),
			`apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: test-ca}
spec: {ca: {secretName: test-ca}}
`, `apiVersion: v1
kind: Namespace
metadata: {name: beta}
`, `apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: beta, namespace: beta}
spec:
  apex: beta.test
  certificates:
    mode: dns01
    issuerRef: {name: test-ca, kind: ClusterIssuer}
`, httpRouteYAML("beta", "app", "app.beta.test"), httpRouteYAML("beta", "www", "www.beta.test"),
			fixture.ServiceYAML("beta", "app", 8080, 8080, beta.IP.String())))
		crt, wildcard := c.certificateFor(t, "beta", "*.beta.test", nil)
		if names, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames"); strings.Join(names, ",") != "beta.test,*.beta.test" {
			t.Errorf("wildcard Certificate dnsNames %v", names)
		}
		betaAddr := c.gatewayAddress(t, "beta", "beta")
		if betaAddr == addr {
			t.Fatalf("both tenants on %s", addr)
		}
		for _, host := range []string{"app.beta.test", "www.beta.test"} {
			kubetest.Eventually(t, clusterWait, host+" served with the wildcard", func() error {
				s, err := servedSerial(betaAddr, host, ca.Pool())
				if err != nil {
					return err
				}
				if s.Cmp(wildcard.SerialNumber) != 0 {
					return fmt.Errorf("serving serial %x, want the wildcard's %x", s, wildcard.SerialNumber)
				}
				return nil
			})
			if out := curlHTTPS(t, betaAddr, host, ca.File); !strings.Contains(out, "beta") {
				t.Errorf("curl https://%s/: %q", host, out)
			}
		}
	})

	t.Run("DatabaseExposure SANs: the controller adds them, cert-manager reissues, psql verify-full by the external name", func(t *testing.T) {
		dbCA := testutil.NewCA(t)
		apply(t, c.cl, fixture.Docs(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: db-ca, namespace: acme}
type: kubernetes.io/tls
data: {tls.crt: %s, tls.key: %s}
`, base64.StdEncoding.EncodeToString(dbCA.CertPEM), base64.StdEncoding.EncodeToString(caKeyPEM(t, dbCA))),
			`apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: db-ca, namespace: acme}
spec: {ca: {secretName: db-ca}}
`, `apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: orders-tls, namespace: acme}
spec:
  secretName: orders-tls
  dnsNames: [orders.acme.svc]
  issuerRef: {name: db-ca, kind: Issuer}
`))
		_, first := c.certificateFor(t, "acme", "orders.acme.svc", nil)
		pgHost := testutil.NetnsHost(t, "orders")
		pg := testutil.StartPostgres(t, testutil.PGOptions{
			Name: "orders.postgres.acme.test", CA: dbCA, Netns: pgHost, Cert: c.secretCert(t, "acme", "orders-tls"),
		})
		apply(t, c.cl, fixture.Docs(`apiVersion: snigate.dev/v1alpha1
kind: TrustAnchor
metadata: {name: db, namespace: acme}
spec:
  sourceSecretRef: {name: orders-tls}
`, `apiVersion: snigate.dev/v1alpha1
kind: DatabaseExposure
metadata: {name: orders, namespace: acme}
spec:
  engine: postgres
  backendRef: {name: orders, port: 5432}
  trustAnchorRef: {name: db}
  certificateRef: {name: orders-tls}
`, fixture.ServiceYAML("acme", "orders", 5432, pg.Port, pgHost.IP.String())))

		// Before: the database serves the certificate without the external names.
		c.waitCondition(t, "acme", "orders", "CertificateVerified", "False", "MissingDNSNames")
		// cert-manager reissues with the names the controller added next to the owner's.
		var reissued *testutil.Cert
		kubetest.Eventually(t, certWait, "orders-tls reissued with the external names", func() error {
			crt := &unstructured.Unstructured{}
			crt.SetGroupVersionKind(certificateGVK)
			if err := c.cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders-tls"}, crt); err != nil {
				return err
			}
			names, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames")
			if strings.Join(names, " ") != "orders.acme.svc orders.acme.test orders.postgres.acme.test" {
				return fmt.Errorf("dnsNames %v", names)
			}
			leaf := c.secretLeafMaybe("acme", "orders-tls")
			if leaf == nil || leaf.SerialNumber.Cmp(first.SerialNumber) == 0 || !conditionTrue(crt, "Ready") {
				return errors.New("not reissued yet")
			}
			reissued = c.secretCert(t, "acme", "orders-tls")
			return nil
		})
		if got := strings.Join(reissued.Leaf.DNSNames, " "); got != "orders.acme.svc orders.acme.test orders.postgres.acme.test" {
			t.Fatalf("reissued certificate names %q", got)
		}
		// The database picks the renewed Secret up, as its sidecar would.
		pg.Rotate(t, reissued)
		c.waitCondition(t, "acme", "orders", "CertificateVerified", "True", "Verified")

		if r := dbPsql(t, pg.ConnString(addr, 5432), "select name from instance"); r.err != nil || strings.TrimSpace(r.stdout) != pg.Name {
			t.Errorf("psql verify-full to orders.postgres.acme.test: %v", r)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, name := range []string{"orders.postgres.acme.test", "orders.acme.test"} {
			crt, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), name)
			if err != nil || crt.SerialNumber.Cmp(reissued.Serial) != 0 {
				t.Errorf("%s: served serial %v (%v), want the reissued %x", name, crt.SerialNumber, err, reissued.Serial)
			}
		}

		// Removing the exposure takes off only the names it added.
		if err := c.cl.Delete(ctx, dbxObject("acme", "orders")); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, clusterWait, "only the added names taken off", func() error {
			crt := &unstructured.Unstructured{}
			crt.SetGroupVersionKind(certificateGVK)
			if err := c.cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders-tls"}, crt); err != nil {
				return err
			}
			if names, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "dnsNames"); strings.Join(names, " ") != "orders.acme.svc" {
				return fmt.Errorf("dnsNames %v", names)
			}
			return nil
		})
	})
}

func httpRouteYAML(ns, name, host string) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: %s}
spec:
  parentRefs: [{name: %s}]
  hostnames: [%s]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
`, name, ns, ns, host)
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := t.TempDir() + "/" + name
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustString(obj *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(obj.Object, fields...)
	return s
}

// plainGET sends GET path with Host host to addr:80 and returns the status and body; it does
// not follow redirects.
func plainGET(addr, host, path string) (int, string, error) {
	cl := &http.Client{Timeout: ioTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(addr, "80")+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// intermediates is the chain of the Certificate's Secret beyond the leaf.
func intermediates(t *testing.T, c *certCluster, ns string, crt *unstructured.Unstructured) *x509.CertPool {
	t.Helper()
	var s corev1.Secret
	if err := c.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: mustString(crt, "spec", "secretName")}, &s); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	rest := s.Data[corev1.TLSCertKey]
	first := true
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return pool
		}
		if first {
			first = false
			continue
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			pool.AddCert(cert)
		}
	}
}

func (c *certCluster) secretLeafMaybe(ns, name string) *x509.Certificate {
	var s corev1.Secret
	if err := c.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return nil
	}
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		return nil
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return leaf
}

// renew sets the Certificate's Issuing condition, cert-manager's manual trigger for a
// reissue (what `cmctl renew` does).
func renew(t *testing.T, c *certCluster, ns, name string) {
	t.Helper()
	kubetest.Eventually(t, clusterWait, "Issuing=True set on "+name, func() error {
		crt := &unstructured.Unstructured{}
		crt.SetGroupVersionKind(certificateGVK)
		if err := c.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, crt); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(crt.Object, "status", "conditions")
		conds = append(conds, map[string]any{
			"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
			"message": "reissue requested by the test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			"observedGeneration": crt.GetGeneration(),
		})
		if err := unstructured.SetNestedSlice(crt.Object, conds, "status", "conditions"); err != nil {
			return err
		}
		return c.cl.Status().Update(context.Background(), crt)
	})
}

// caKeyPEM is the test CA's private key as PEM, for a cert-manager CA issuer's Secret.
func caKeyPEM(t *testing.T, ca *testutil.CA) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// keepAlive is one HTTPS connection that sends a request on each get, on the same
// connection: the established connection of the renewal check.
type keepAlive struct {
	conn     *tls.Conn
	r        *bufio.Reader
	host     string
	serial   *big.Int
	requests int
}

func openKeepAlive(t *testing.T, addr, host string, roots *x509.CertPool) *keepAlive {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(addr, "443"),
		&tls.Config{ServerName: host, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	k := &keepAlive{conn: conn, r: bufio.NewReader(conn), host: host, serial: conn.ConnectionState().PeerCertificates[0].SerialNumber}
	if err := k.get(); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *keepAlive) get() error {
	_ = k.conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := fmt.Fprintf(k.conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", k.host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	k.requests++
	return nil
}

func (k *keepAlive) Close() error { return k.conn.Close() }

// secretCert is a Secret's tls.crt and tls.key.
func (c *certCluster) secretCert(t *testing.T, ns, name string) *testutil.Cert {
	t.Helper()
	var s corev1.Secret
	if err := c.cl.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return testutil.ParseCert(t, s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
}

// waitCondition waits for a DatabaseExposure's condition to have status and reason.
func (c *certCluster) waitCondition(t *testing.T, ns, name, typ, status, reason string) {
	t.Helper()
	kubetest.Eventually(t, certWait, fmt.Sprintf("DatabaseExposure %s %s=%s %s", name, typ, status, reason), func() error {
		dbx := dbxObject(ns, name)
		if err := c.cl.Get(context.Background(), client.ObjectKeyFromObject(dbx), dbx); err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(dbx.Object, "status", "conditions")
		for _, cd := range conds {
			m, _ := cd.(map[string]any)
			if m["type"] == typ {
				if m["status"] == status && m["reason"] == reason {
					return nil
				}
				return fmt.Errorf("%s=%v %v: %v", typ, m["status"], m["reason"], m["message"])
			}
		}
		return fmt.Errorf("no %s condition: %v", typ, dbx.Object["status"])
	})
}

func dbxObject(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "snigate.dev", Version: "v1alpha1", Kind: "DatabaseExposure"})
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
