package e2e

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// sharedAddr is the loopback address of the standalone shared-Gateway test.
const sharedAddr = "127.0.0.48"

// TestSharedGatewayStandalone is TestTenantGatewaysShareAddress in standalone mode: from files, two TenantGateways with
// spec.parentGatewayRef render ListenerSets on one platform Gateway, and both tenants'
// PostgreSQL answer on the one address's 5432 by their own hostnames, verify-full, while
// `snigate check` reports each ListenerSet.
func TestSharedGatewayStandalone(t *testing.T) {
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (the Gateway binds port 80)", errors.New("not root"))
	}
	dbPsqlBin(t)
	ca := testutil.NewCA(t)
	docs := []string{`apiVersion: v1
kind: Namespace
metadata: {name: platform}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: platform}
spec:
  gatewayClassName: snigate
  allowedListeners: {namespaces: {from: All}}
  listeners:
  - {name: platform, port: 80, protocol: HTTP, hostname: platform.example.test}
`}
	pgs := map[string]*testutil.Postgres{}
	for _, tn := range []string{"a", "b"} {
		apex := tn + ".example.test"
		pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "orders.postgres." + apex})
		pgs[tn] = pg
		docs = append(docs, sharedTenantYAML(tn, "{}"), fixture.ServiceYAML(tn, "orders", 5432, pg.Port, "127.0.0.1"),
			fixture.TLSSecretYAML(tn, "wildcard", ca.Issue(t, apex, "*."+apex).Cert))
	}
	dir := configDir(t)
	writeFile(t, dir, "platform.yaml", fixture.Docs(docs...))

	out, code := runCheck(t, dir)
	for _, want := range []string{"ListenerSet a/a  on Gateway platform/shared", "ListenerSet b/b  on Gateway platform/shared",
		"listener tls-postgres  TLS 5432 *.a.example.test Passthrough", "listener tls-postgres  TLS 5432 *.b.example.test Passthrough"} {
		if !strings.Contains(out, want) {
			t.Errorf("snigate check does not show %q (exit %d):\n%s", want, code, out)
		}
	}

	startGateway(t, dir, "--bind", sharedAddr)
	kubetest.Eventually(t, clusterWait, "both tenants' databases on "+sharedAddr+":5432", func() error {
		for tn, pg := range pgs {
			if r := dbPsql(t, pg.ConnString(sharedAddr, 5432), "select name from instance"); r.err != nil || strings.TrimSpace(r.stdout) != pg.Name {
				return fmt.Errorf("tenant %s: %v", tn, r)
			}
		}
		return nil
	})
}
