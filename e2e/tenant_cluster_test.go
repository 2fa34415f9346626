package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// clusterWait bounds every wait on the controller: an API server on a loaded machine is
// slow to start watches, and a render, an apply and a status write follow each other.
const clusterWait = 60 * time.Second

// TestTenantGatewayStandalone's checks in cluster mode: the TenantGateway lives in a real
// kube-apiserver, `snigate controller` renders it into a Gateway there and serves that
// Gateway on an address of its own (--local-addresses), and the backends are in network
// namespaces (the API server refuses loopback endpoints), reached through EndpointSlices.
// The traffic goes through exactly what the controller rendered and applied.
func TestTenantGatewayCluster(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (network namespaces, and the Gateway binds ports 80 and 443)", errors.New("not root"))
	}
	dbPsqlBin(t)
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	// cert-manager's CRDs, not cert-manager: dns01's HTTPS listeners are held back without
	// them (CertManagerNotInstalled); with them the Certificate is rendered and the test
	// fills its Secret itself.
	crds = append(crds, kubetest.CertManagerCRDs(t)...)
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: crds})
	kubeconfig := writeKubeconfig(t, env)
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	ca := testutil.NewCA(t)
	wildcard := ca.Issue(t, "example.test", "*.example.test")
	vaultCert := ca.Issue(t, "vault.example.test")
	appHost := testutil.NetnsHost(t, "app")
	vaultHost := testutil.NetnsHost(t, "vault")
	pgHost := testutil.NetnsHost(t, "pg")
	const appPort, vaultPort = 8080, 8200 // each backend has its namespace's ports to itself
	appHost.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(appHost.IP.String(), strconv.Itoa(appPort)), "--name", "app", "--http")
	certFile, keyFile := vaultCert.WriteFiles(t, t.TempDir())
	vaultHost.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(vaultHost.IP.String(), strconv.Itoa(vaultPort)), "--name", "vault", "--cert", certFile, "--key", keyFile)
	pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "orders.pg.example.test", Netns: pgHost})
	waitListening(t, net.JoinHostPort(appHost.IP.String(), strconv.Itoa(appPort)))
	waitListening(t, net.JoinHostPort(vaultHost.IP.String(), strconv.Itoa(vaultPort)))
	pgPort := testutil.FreePorts(t, 1)[0]

	apply(t, cl, fixture.Docs(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
`, `apiVersion: v1
kind: Namespace
metadata: {name: acme}
`, tenantYAML("{mode: dns01, issuerRef: {name: x, kind: ClusterIssuer}}", pgPort),
		fixture.ServiceYAML("acme", "app", 8080, appPort, appHost.IP.String()),
		fixture.ServiceYAML("acme", "vault", 8200, vaultPort, vaultHost.IP.String()),
		fixture.ServiceYAML("acme", "orders", 5432, pg.Port, pgHost.IP.String()),
		// What cert-manager would write for the rendered Certificate acme-wildcard.
		fixture.TLSSecretYAML("acme", "acme-wildcard-tls", wildcard.Cert)))

	startSnigate(t, "", "controller", "--kubeconfig", kubeconfig, "--leader-elect=false",
		"--local-addresses", "127.0.0.0/24")

	ctx := context.Background()
	tgw := &unstructured.Unstructured{}
	tgw.SetGroupVersionKind(schema.GroupVersionKind{Group: "snigate.dev", Version: "v1alpha1", Kind: "TenantGateway"})
	var addr string
	t.Run("status", func(t *testing.T) {
		kubetest.Eventually(t, clusterWait, "TenantGateway Ready with its address", func() error {
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, tgw); err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(tgw.Object, "status", "conditions")
			ready := false
			for _, c := range conds {
				m, _ := c.(map[string]any)
				ready = ready || (m["type"] == "Ready" && m["status"] == "True")
			}
			if !ready {
				return fmt.Errorf("not Ready: %v", tgw.Object["status"])
			}
			gw := &unstructured.Unstructured{}
			gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, gw); err != nil {
				return err
			}
			addrs, _, _ := unstructured.NestedSlice(gw.Object, "status", "addresses")
			if len(addrs) == 0 {
				return fmt.Errorf("the Gateway has no status.addresses: %v", gw.Object["status"])
			}
			a, _ := addrs[0].(map[string]any)
			addr, _ = a["value"].(string)
			if !strings.HasPrefix(addr, "127.0.0.") {
				return fmt.Errorf("Gateway address %q, want one of 127.0.0.0/24", addr)
			}
			return nil
		})
		listeners, _, _ := unstructured.NestedSlice(tgw.Object, "status", "listeners")
		if len(listeners) != 5 {
			t.Errorf("%d listeners in the status, want 5: %v", len(listeners), listeners)
		}
	})
	if addr == "" {
		t.FailNow()
	}
	// The data plane may lag the status by a moment: wait until it answers on 443.
	kubetest.Eventually(t, clusterWait, "the Gateway serving on "+addr, func() error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", net.JoinHostPort(addr, "443"),
			&tls.Config{ServerName: "app.example.test", RootCAs: ca.Pool()})
		if err != nil {
			return err
		}
		return c.Close()
	})

	tenantTraffic{addr: addr, pgPort: pgPort, ca: ca, wildcard: wildcard, vault: vaultCert, pg: pg}.check(t)
}

// waitListening waits until something accepts TCP connections on addr.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	kubetest.Eventually(t, 30*time.Second, "a listener on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}
