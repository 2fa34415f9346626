package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/fixture"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

var listenerSetGVK = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "ListenerSet"}

// Many tenants on one address: a platform Gateway that takes the ListenerSets of namespaces
// labelled tenant=yes, and three tenants each with a ListenerSet whose PostgreSQL listener
// is on 5432 under its own apex. Each tenant's database is reached on the one address by its
// own hostname with the backend's own certificate; tenant a also has an HTTPS app and a TCP
// listener in its set. Tenant b's route cannot attach to a's listener (the status says why,
// and the name gets no traffic); a client without SNI is closed; an outsider's set is
// NotAllowed and a younger set's listener that takes a's hostname is Conflicted while a's
// keeps serving; removing tenant b removes only its listener. A connection to a's database
// held open across all of it keeps working.
func TestListenerSetsCluster(t *testing.T) {
	env, cl := startSharedGatewayCluster(t, false)
	ctx := context.Background()
	ca := testutil.NewCA(t)
	tenants := []string{"a", "b", "c"}
	pgs := map[string]*testutil.Postgres{}
	docs := append(sharedGatewayDocs("http"), `apiVersion: v1
kind: Namespace
metadata: {name: outsider}
`)
	for _, tn := range tenants {
		host := testutil.NetnsHost(t, "pg-"+tn)
		pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "db." + tn + ".example.test", Netns: host})
		pgs[tn] = pg
		set := fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: %[1]s, namespace: %[1]s}
spec:
  parentRef: {name: shared, namespace: platform}
  listeners:
  - {name: pg, port: 5432, protocol: TLS, hostname: "*.%[1]s.example.test", tls: {mode: Passthrough}}
`, tn)
		if tn == "a" {
			// a's set holds an HTTPS app and a TCP listener too (its database again, by port).
			set += `  - {name: app, port: 443, protocol: HTTPS, hostname: app.a.example.test, tls: {certificateRefs: [{name: app-tls}]}}
  - {name: sql, port: 15432, protocol: TCP}
`
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {tenant: "yes"}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: db, namespace: %[1]s}
spec:
  parentRefs: [{kind: ListenerSet, name: %[1]s, sectionName: pg}]
  hostnames: [db.%[1]s.example.test]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
`, tn), set, fixture.ServiceYAML(tn, "db", 5432, pg.Port, host.IP.String()))
	}
	appHost := testutil.NetnsHost(t, "app-a")
	appHost.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(appHost.IP.String(), "8080"), "--name", "app-a", "--http")
	waitListening(t, net.JoinHostPort(appHost.IP.String(), "8080"))
	appCert := ca.Issue(t, "app.a.example.test")
	docs = append(docs, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: a}
spec:
  parentRefs: [{kind: ListenerSet, name: a, sectionName: app}]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
`, `apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: sql, namespace: a}
spec:
  parentRefs: [{kind: ListenerSet, name: a, sectionName: sql}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
`, `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: steal, namespace: b}
spec:
  parentRefs: [{kind: ListenerSet, name: a, namespace: a, sectionName: pg}]
  hostnames: [evil.a.example.test]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
`, fixture.ServiceYAML("a", "app", 8080, 8080, appHost.IP.String()), fixture.TLSSecretYAML("a", "app-tls", appCert.Cert))
	apply(t, cl, fixture.Docs(docs...))
	// A session to a's database, held open through every change below.
	s := startSharedTenants(t, env, cl, "127.0.4.0/24", tenants, pgs)
	addr, cctx, stillHeld := s.addr, s.ctx, s.stillHeld

	t.Run("each tenant's database by its own hostname, with the backend's own certificate", func(t *testing.T) {
		for _, tn := range tenants {
			crt, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), pgs[tn].Name)
			if err != nil || crt.SerialNumber.Cmp(pgs[tn].Cert.Serial) != 0 {
				t.Errorf("tenant %s: served %v (%v), want the database's own serial %x", tn, crt, err, pgs[tn].Cert.Serial)
			}
		}
	})

	t.Run("tenant a's HTTPS app and TCP listener inside its set", func(t *testing.T) {
		resp, err := addrHTTPClient(addr, ca, nil).Get("https://app.a.example.test/")
		if err != nil {
			t.Fatalf("https://app.a.example.test/: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("https://app.a.example.test/: %d", resp.StatusCode)
		}
		if r := dbPsql(t, pgs["a"].ConnString(addr, 15432), "select name from instance"); r.err != nil || strings.TrimSpace(r.stdout) != pgs["a"].Name {
			t.Errorf("psql through the TCP listener 15432: %v", r)
		}
	})

	t.Run("b's route cannot attach to a's listener, and its name gets nothing", func(t *testing.T) {
		kubetest.Eventually(t, clusterWait, "TLSRoute b/steal refused", func() error {
			return routeParentReason(ctx, cl, "b", "steal", "NotAllowedByListeners")
		})
		addrRejectedTLS(t, addr, 5432, &tls.Config{ServerName: "evil.a.example.test", RootCAs: ca.Pool()})
	})

	t.Run("no SNI is closed with zero bytes", func(t *testing.T) {
		addrRejectedTLS(t, addr, 5432, &tls.Config{InsecureSkipVerify: true})
	})

	t.Run("an outsider's set is NotAllowed; a younger set taking a's hostname is Conflicted, a keeps serving", func(t *testing.T) {
		apply(t, cl, fixture.Docs(`apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: outsider, namespace: outsider}
spec:
  parentRef: {name: shared, namespace: platform}
  listeners:
  - {name: pg, port: 5432, protocol: TLS, hostname: "*.outsider.example.test", tls: {mode: Passthrough}}
`, `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: late, namespace: c}
spec:
  parentRef: {name: shared, namespace: platform}
  listeners:
  - {name: pg, port: 5432, protocol: TLS, hostname: "*.a.example.test", tls: {mode: Passthrough}}
`))
		kubetest.Eventually(t, clusterWait, "outsider NotAllowed, late Conflicted", func() error {
			if err := listenerSetCondition(ctx, cl, "outsider", "outsider", "Accepted", "False", "NotAllowed"); err != nil {
				return err
			}
			if err := listenerSetCondition(ctx, cl, "c", "late", "Accepted", "False", "ListenersNotValid"); err != nil {
				return err
			}
			return listenerEntryCondition(ctx, cl, "c", "late", "pg", "Conflicted", "True", "HostnameConflict")
		})
		s.served(t, "after the bad sets", tenants...)
		stillHeld(t)
	})

	t.Run("removing tenant b removes only its listener", func(t *testing.T) {
		ls := &unstructured.Unstructured{}
		ls.SetGroupVersionKind(listenerSetGVK)
		ls.SetNamespace("b")
		ls.SetName("b")
		if err := cl.Delete(ctx, ls); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, clusterWait, "b's database gone from 5432", func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "5432"), ioTimeout)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), pgs["b"].Name); err == nil {
				return errors.New("still served")
			}
			return nil
		})
		s.served(t, "after b left", "a", "c")
		stillHeld(t)
	})
}

// listenerSetGatewayAddress waits for the shared Gateway's address, with the three tenants'
// ListenerSets attached.
func listenerSetGatewayAddress(t *testing.T, cl client.Client) string {
	t.Helper()
	return waitGatewayAddress(t, cl, "platform", "shared", func(gw *unstructured.Unstructured) error {
		if n, _, _ := unstructured.NestedInt64(gw.Object, "status", "attachedListenerSets"); n != 3 {
			return fmt.Errorf("attachedListenerSets %d, want 3", n)
		}
		return nil
	})
}

func listenerSetCondition(ctx context.Context, cl client.Client, ns, name, typ, status, reason string) error {
	ls := &unstructured.Unstructured{}
	ls.SetGroupVersionKind(listenerSetGVK)
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ls); err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(ls.Object, "status", "conditions")
	return findCondition(fmt.Sprintf("ListenerSet %s/%s", ns, name), conds, typ, status, reason)
}

func listenerEntryCondition(ctx context.Context, cl client.Client, ns, name, listener, typ, status, reason string) error {
	ls := &unstructured.Unstructured{}
	ls.SetGroupVersionKind(listenerSetGVK)
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ls); err != nil {
		return err
	}
	entries, _, _ := unstructured.NestedSlice(ls.Object, "status", "listeners")
	for _, e := range entries {
		m, _ := e.(map[string]any)
		if m["name"] == listener {
			conds, _ := m["conditions"].([]any)
			return findCondition(fmt.Sprintf("ListenerSet %s/%s listener %s", ns, name, listener), conds, typ, status, reason)
		}
	}
	return fmt.Errorf("ListenerSet %s/%s has no status for listener %s", ns, name, listener)
}

func routeParentReason(ctx context.Context, cl client.Client, ns, name, reason string) error {
	rt := &unstructured.Unstructured{}
	rt.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "TLSRoute"})
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rt); err != nil {
		return err
	}
	parents, _, _ := unstructured.NestedSlice(rt.Object, "status", "parents")
	for _, p := range parents {
		m, _ := p.(map[string]any)
		conds, _ := m["conditions"].([]any)
		if err := findCondition("TLSRoute "+ns+"/"+name, conds, "Accepted", "False", reason); err == nil {
			return nil
		}
	}
	return fmt.Errorf("TLSRoute %s/%s: no parent Accepted=False %s: %v", ns, name, reason, parents)
}

func findCondition(what string, conds []any, typ, status, reason string) error {
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			if m["status"] == status && m["reason"] == reason {
				return nil
			}
			return fmt.Errorf("%s: %s=%v %v: %v", what, typ, m["status"], m["reason"], m["message"])
		}
	}
	return fmt.Errorf("%s: no %s condition", what, typ)
}

// Three TenantGateways with spec.parentGatewayRef share the platform Gateway's one address:
// each renders a ListenerSet instead of a Gateway, and each tenant's PostgreSQL (a
// DatabaseExposure) is reached on 5432 by its own hostname with the backend's own
// certificate, next to tenant a's HTTPS app. Tenant b's route cannot attach to a's
// listener; a client without SNI is closed; deleting tenant b's TenantGateway removes its
// ListenerSet and nothing else, and a session held open to a's database keeps working.
func TestTenantGatewaysShareAddress(t *testing.T) {
	// The garbage collector deletes a deleted TenantGateway's ListenerSet.
	env, cl := startSharedGatewayCluster(t, true)
	ctx := context.Background()
	ca := testutil.NewCA(t)
	tenants := []string{"a", "b", "c"}
	pgs := map[string]*testutil.Postgres{}
	docs := sharedGatewayDocs("platform")
	for _, tn := range tenants {
		host := testutil.NetnsHost(t, "pg-"+tn)
		apex := tn + ".example.test"
		pg := testutil.StartPostgres(t, testutil.PGOptions{CA: ca, Name: "orders.postgres." + apex, Netns: host})
		pgs[tn] = pg
		docs = append(docs, sharedTenantYAML(tn, `{tenant: "yes"}`), fixture.ServiceYAML(tn, "orders", 5432, pg.Port, host.IP.String()),
			fixture.TLSSecretYAML(tn, "wildcard", ca.Issue(t, apex, "*."+apex).Cert))
	}
	appHost := testutil.NetnsHost(t, "app-a")
	appHost.Start(t, snigateBin, "echo", "--listen", net.JoinHostPort(appHost.IP.String(), "8080"), "--name", "app-a", "--http")
	waitListening(t, net.JoinHostPort(appHost.IP.String(), "8080"))
	docs = append(docs, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: a}
spec:
  parentRefs: [{kind: ListenerSet, name: a}]
  hostnames: [app.a.example.test]
  rules: [{backendRefs: [{name: app, port: 8080}]}]
`, `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: steal, namespace: b}
spec:
  parentRefs: [{kind: ListenerSet, name: a, namespace: a, sectionName: tls-postgres}]
  hostnames: [evil.postgres.a.example.test]
  rules: [{backendRefs: [{name: orders, port: 5432}]}]
`, fixture.ServiceYAML("a", "app", 8080, 8080, appHost.IP.String()))
	apply(t, cl, fixture.Docs(docs...))
	s := startSharedTenants(t, env, cl, "127.0.5.0/24", tenants, pgs)
	addr, cctx, stillHeld := s.addr, s.ctx, s.stillHeld

	t.Run("each TenantGateway is a ListenerSet, Ready, with the shared address", func(t *testing.T) {
		for _, tn := range tenants {
			gw := &unstructured.Unstructured{}
			gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
			if err := cl.Get(ctx, client.ObjectKey{Namespace: tn, Name: tn}, gw); err == nil {
				t.Errorf("tenant %s has a Gateway of its own", tn)
			}
			kubetest.Eventually(t, clusterWait, "TenantGateway "+tn+" Ready at "+addr, func() error {
				tgw := &unstructured.Unstructured{}
				tgw.SetGroupVersionKind(schema.GroupVersionKind{Group: "snigate.dev", Version: "v1alpha1", Kind: "TenantGateway"})
				if err := cl.Get(ctx, client.ObjectKey{Namespace: tn, Name: tn}, tgw); err != nil {
					return err
				}
				conds, _, _ := unstructured.NestedSlice(tgw.Object, "status", "conditions")
				if err := findCondition("TenantGateway "+tn, conds, "Ready", "True", "Ready"); err != nil {
					return err
				}
				addrs, _, _ := unstructured.NestedSlice(tgw.Object, "status", "addresses")
				if len(addrs) != 1 || addrs[0].(map[string]any)["value"] != addr {
					return fmt.Errorf("addresses %v, want %s", addrs, addr)
				}
				return nil
			})
		}
	})

	t.Run("the backends' own certificates, and a's HTTPS app", func(t *testing.T) {
		for _, tn := range tenants {
			crt, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), pgs[tn].Name)
			if err != nil || crt.SerialNumber.Cmp(pgs[tn].Cert.Serial) != 0 {
				t.Errorf("tenant %s: served %v (%v), want the database's own serial", tn, crt, err)
			}
		}
		resp, err := addrHTTPClient(addr, ca, nil).Get("https://app.a.example.test/")
		if err != nil {
			t.Fatalf("https://app.a.example.test/: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("https://app.a.example.test/: %d", resp.StatusCode)
		}
	})

	t.Run("b's route cannot attach to a's listener; no SNI is closed", func(t *testing.T) {
		kubetest.Eventually(t, clusterWait, "TLSRoute b/steal refused", func() error {
			return routeParentReason(ctx, cl, "b", "steal", "NotAllowedByListeners")
		})
		addrRejectedTLS(t, addr, 5432, &tls.Config{ServerName: "evil.postgres.a.example.test", RootCAs: ca.Pool()})
		addrRejectedTLS(t, addr, 5432, &tls.Config{InsecureSkipVerify: true})
	})

	t.Run("the platform's listener cap refuses a newcomer whole; the tenants there keep serving", func(t *testing.T) {
		// The cap is what the Gateway and the three sets hold now: a fourth tenant goes beyond.
		total := 1 // the Gateway's own listener
		for _, tn := range tenants {
			ls := &unstructured.Unstructured{}
			ls.SetGroupVersionKind(listenerSetGVK)
			if err := cl.Get(ctx, client.ObjectKey{Namespace: tn, Name: tn}, ls); err != nil {
				t.Fatal(err)
			}
			entries, _, _ := unstructured.NestedSlice(ls.Object, "spec", "listeners")
			total += len(entries)
		}
		capGateway := func(v string) {
			t.Helper()
			gw := &unstructured.Unstructured{}
			gw.SetGroupVersionKind(schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"})
			gw.SetNamespace("platform")
			gw.SetName("shared")
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, "snigate.dev/max-listeners", v)
			if err := cl.Patch(ctx, gw, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Fatal(err)
			}
		}
		capGateway(strconv.Itoa(total))
		apply(t, cl, fixture.Docs(sharedTenantYAML("d", `{tenant: "yes"}`),
			fixture.TLSSecretYAML("d", "wildcard", ca.Issue(t, "d.example.test", "*.d.example.test").Cert)))
		kubetest.Eventually(t, clusterWait, "ListenerSet d/d refused by the cap, and TenantGateway d saying why", func() error {
			if err := listenerSetCondition(ctx, cl, "d", "d", "Accepted", "False", "NotAllowed"); err != nil {
				return err
			}
			tgw := &unstructured.Unstructured{}
			tgw.SetGroupVersionKind(schema.GroupVersionKind{Group: "snigate.dev", Version: "v1alpha1", Kind: "TenantGateway"})
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "d", Name: "d"}, tgw); err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(tgw.Object, "status", "conditions")
			if err := findCondition("TenantGateway d", conds, "Ready", "False", "NotAllowed"); err != nil {
				return err
			}
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Ready" && !strings.Contains(fmt.Sprint(m["message"]), fmt.Sprintf("takes at most %d listeners", total)) {
					return fmt.Errorf("Ready message %q does not name the cap", m["message"])
				}
			}
			return nil
		})
		s.served(t, "beside the refused newcomer", tenants...)
		stillHeld(t)
		// Room for it: the newcomer's set is taken.
		capGateway(strconv.Itoa(total + 64))
		kubetest.Eventually(t, clusterWait, "ListenerSet d/d accepted once the cap leaves room", func() error {
			return listenerSetCondition(ctx, cl, "d", "d", "Accepted", "True", "Accepted")
		})
	})

	t.Run("deleting tenant b removes only its listeners", func(t *testing.T) {
		tgw := &unstructured.Unstructured{}
		tgw.SetGroupVersionKind(schema.GroupVersionKind{Group: "snigate.dev", Version: "v1alpha1", Kind: "TenantGateway"})
		tgw.SetNamespace("b")
		tgw.SetName("b")
		if err := cl.Delete(ctx, tgw); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 2*clusterWait, "b's ListenerSet gone and its database unreachable", func() error {
			ls := &unstructured.Unstructured{}
			ls.SetGroupVersionKind(listenerSetGVK)
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "b", Name: "b"}, ls); err == nil {
				return errors.New("ListenerSet b/b still there")
			}
			if _, err := testutil.PeerCertPostgres(cctx, net.JoinHostPort(addr, "5432"), pgs["b"].Name); err == nil {
				return errors.New("b's database still served")
			}
			return nil
		})
		s.served(t, "after b left", "a", "c")
		stillHeld(t)
	})
}

// sharedTenants is a running `snigate controller` whose shared Gateway serves the tenants'
// databases, with what the shared-Gateway tests check it with.
type sharedTenants struct {
	t    *testing.T
	addr string          // the shared Gateway's address
	ctx  context.Context // bounds the test's database work
	pgs  map[string]*testutil.Postgres
	held *pgx.Conn // a session to tenant a's database, held open through the test
}

// startSharedTenants starts `snigate controller` on env with local addresses from prefix,
// waits until every tenant's database answers on the shared Gateway's address and port 5432,
// and opens the held session to tenant a's.
func startSharedTenants(t *testing.T, env *envtest.Environment, cl client.Client, prefix string, tenants []string, pgs map[string]*testutil.Postgres) *sharedTenants {
	t.Helper()
	startSnigate(t, "", "controller", "--kubeconfig", writeKubeconfig(t, env), "--leader-elect=false",
		"--local-addresses", prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s := &sharedTenants{t: t, addr: listenerSetGatewayAddress(t, cl), ctx: ctx, pgs: pgs}
	kubetest.Eventually(t, clusterWait, "every tenant's database on "+s.addr+":5432", func() error {
		for _, tn := range tenants {
			if r := s.psql(tn); r.err != nil || strings.TrimSpace(r.stdout) != pgs[tn].Name {
				return fmt.Errorf("tenant %s: %v", tn, r)
			}
		}
		return nil
	})
	held, err := pgxConnect(ctx, testutil.PgxConfig(t, pgs["a"].ConnString(s.addr, 5432), s.addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close(context.Background()) })
	s.held = held
	return s
}

// psql asks tenant tn's database for its name through the shared Gateway.
func (s *sharedTenants) psql(tn string) dbCmdResult {
	return dbPsql(s.t, s.pgs[tn].ConnString(s.addr, 5432), "select name from instance")
}

// served checks that each tenant's database still answers through the shared Gateway;
// when says when, for the message.
func (s *sharedTenants) served(t *testing.T, when string, tenants ...string) {
	t.Helper()
	for _, tn := range tenants {
		if r := s.psql(tn); r.err != nil || strings.TrimSpace(r.stdout) != s.pgs[tn].Name {
			t.Errorf("tenant %s %s: %v", tn, when, r)
		}
	}
}

// stillHeld checks that the held session to a's database still works.
func (s *sharedTenants) stillHeld(t *testing.T) {
	t.Helper()
	var name string
	if err := s.held.QueryRow(s.ctx, "select name from instance").Scan(&name); err != nil || name != s.pgs["a"].Name {
		t.Errorf("the session held open to a's database: %q, %v", name, err)
	}
}

// startSharedGatewayCluster starts a real API server with the Gateway API and snigate CRDs
// (and the garbage collector when gc) for the shared-Gateway tests, which run as root: the
// backends are in network namespaces and the Gateway binds its ports.
func startSharedGatewayCluster(t *testing.T, gc bool) (*envtest.Environment, client.Client) {
	t.Helper()
	needBinary(t)
	if os.Geteuid() != 0 {
		testutil.Require(t, "root (network namespaces, and the Gateway binds its ports)", errors.New("not root"))
	}
	dbPsqlBin(t)
	env := kubetest.StartAPIServer(t, kubetest.Options{CRDs: append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...), GarbageCollector: gc})
	cl, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return env, cl
}

// sharedGatewayDocs are the GatewayClass and the platform's Gateway platform/shared, which
// takes the ListenerSets of namespaces labelled tenant=yes; its own listener (named
// listener) serves platform.example.test on 80.
func sharedGatewayDocs(listener string) []string {
	return []string{`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: snigate}
spec: {controllerName: snigate.dev/gateway-controller}
`, `apiVersion: v1
kind: Namespace
metadata: {name: platform}
`, fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: shared, namespace: platform}
spec:
  gatewayClassName: snigate
  allowedListeners:
    namespaces: {from: Selector, selector: {matchLabels: {tenant: "yes"}}}
  listeners:
  - {name: %s, port: 80, protocol: HTTP, hostname: platform.example.test}
`, listener)}
}

// sharedTenantYAML is tenant tn's namespace (with labels), its TenantGateway on
// platform/shared (apex <tn>.example.test, the Secret wildcard) and its DatabaseExposure
// orders (postgres, Service orders:5432).
func sharedTenantYAML(tn, labels string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: %[2]s}
---
apiVersion: snigate.dev/v1alpha1
kind: TenantGateway
metadata: {name: %[1]s, namespace: %[1]s}
spec:
  apex: %[1]s.example.test
  parentGatewayRef: {namespace: platform, name: shared}
  certificates: {mode: existingSecret, wildcardSecretRef: {name: wildcard}}
---
apiVersion: snigate.dev/v1alpha1
kind: DatabaseExposure
metadata: {name: orders, namespace: %[1]s}
spec:
  engine: postgres
  backendRef: {name: orders, port: 5432}
`, tn, labels)
}
