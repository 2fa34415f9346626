package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/provision"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// The controller publishes DatabaseExposures through their TenantGateway: one TLSRoute per
// release, owned by its exposure and applied under snigate's field manager, on a listener
// per engine that comes with the first exposure and goes with the last (the garbage
// collector removes a deleted exposure's route); a server-speaks-first engine gets its TCP
// listener and TCPRoute; the exposures' status is written. It runs as the install's
// ServiceAccount: a missing permission fails the test.
func TestDatabaseExposureOnRealAPIServer(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{CRDs: crds, GarbageCollector: true}})
	cl, ctx := kc.Client, context.Background()
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := cl.Create(ctx, o); err != nil {
				t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
			}
		}
	}
	dbx := func(name string, engine v1alpha1.Engine, port int32, extra ...func(*v1alpha1.DatabaseExposure)) *v1alpha1.DatabaseExposure {
		d := &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: name}, Spec: v1alpha1.DatabaseExposureSpec{
			Engine: engine, BackendRef: v1alpha1.DatabaseBackendRef{Name: name, Port: port}}}
		for _, f := range extra {
			f(d)
		}
		return d
	}
	create(
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}, Spec: v1alpha1.TenantGatewaySpec{Apex: "acme.example.test"}},
		dbx("orders", v1alpha1.EnginePostgres, 5432),
		dbx("billing", v1alpha1.EnginePostgres, 5432),
		dbx("cache", v1alpha1.EngineRedis, 6379),
		dbx("legacy", v1alpha1.EngineMariaDB, 3306, func(d *v1alpha1.DatabaseExposure) { d.Spec.Port = ptrTo(int32(13306)) }),
	)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Provisioning on: the Gateway's LoadBalancer Service carries a port per listener port.
	c, err := New(Config{REST: kc.As(kubetest.ControllerUser), Logger: log,
		Provision: &provision.Options{Image: "registry.example/snigate:test"}})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)

	// state is the Gateway's database listeners, its provisioned Service's ports and every
	// TLSRoute and TCPRoute, each route with its hostnames and the exposure that controls it.
	state := func() (string, error) {
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &gw); err != nil {
			return "", err
		}
		var parts []string
		for _, l := range gw.Spec.Listeners {
			if l.Port != 80 && l.Port != 443 {
				parts = append(parts, fmt.Sprintf("%s:%d", l.Name, l.Port))
			}
		}
		var svc corev1.Service
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: provision.Name(&gw)}, &svc); err != nil {
			return "", fmt.Errorf("the provisioned Service: %w", err)
		}
		var ports []string
		for _, p := range svc.Spec.Ports {
			ports = append(ports, strconv.Itoa(int(p.Port)))
		}
		parts = append(parts, "service["+strings.Join(ports, ",")+"]")
		var tls gwv1.TLSRouteList
		var tcp gwv1.TCPRouteList
		if err := cl.List(ctx, &tls); err != nil {
			return "", err
		}
		if err := cl.List(ctx, &tcp); err != nil {
			return "", err
		}
		var routes []string
		owner := func(o metav1.Object) string {
			if ref := metav1.GetControllerOf(o); ref != nil {
				return ref.Kind + "/" + ref.Name
			}
			return "none"
		}
		for _, r := range tls.Items {
			var hosts []string
			for _, h := range r.Spec.Hostnames {
				hosts = append(hosts, string(h))
			}
			routes = append(routes, fmt.Sprintf("TLSRoute %s [%s] by %s", r.Name, strings.Join(hosts, " "), owner(&r)))
		}
		for _, r := range tcp.Items {
			routes = append(routes, fmt.Sprintf("TCPRoute %s by %s", r.Name, owner(&r)))
		}
		slices.Sort(routes)
		return strings.Join(parts, " ") + " | " + strings.Join(routes, ", "), nil
	}
	expect := func(t *testing.T, what, want string) {
		t.Helper()
		kubetest.Eventually(t, 60*time.Second, what, func() error {
			got, err := state()
			if err == nil && got != want {
				err = fmt.Errorf("\n  %s\nwant\n  %s", got, want)
			}
			return err
		})
	}

	t.Run("each release gets its route on its engine's listener", func(t *testing.T) {
		expect(t, "rendered", "tls-postgres:5432 tls-redis:6379 tcp-legacy:13306 service[80,5432,6379,13306] | "+
			"TCPRoute legacy by DatabaseExposure/legacy, "+
			"TLSRoute billing [billing.postgres.acme.example.test billing.acme.example.test] by DatabaseExposure/billing, "+
			"TLSRoute cache [cache.redis.acme.example.test cache.acme.example.test] by DatabaseExposure/cache, "+
			"TLSRoute orders [orders.postgres.acme.example.test orders.acme.example.test] by DatabaseExposure/orders")
	})

	t.Run("the status says where and how to connect", func(t *testing.T) {
		kubetest.Eventually(t, 30*time.Second, "orders status", func() error {
			var d v1alpha1.DatabaseExposure
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders"}, &d); err != nil {
				return err
			}
			st := d.Status
			if st.Listener != "tls-postgres" || st.Port != 5432 || len(st.Hostnames) != 2 || !strings.Contains(st.Connect, "sslmode=verify-full") {
				return fmt.Errorf("status %+v", st)
			}
			if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAccepted) {
				return fmt.Errorf("conditions %+v", st.Conditions)
			}
			// Programmed needs the data plane's verdict on the route: the controller's own
			// translate accepts it once the Gateway is ours.
			if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProgrammed); c == nil {
				return fmt.Errorf("no Programmed condition: %+v", st.Conditions)
			}
			return nil
		})
	})

	t.Run("a new release on a listener in use is one apply, its route's", func(t *testing.T) {
		rendered := "tls-postgres:5432 tls-redis:6379 tcp-legacy:13306 service[80,5432,6379,13306] | " +
			"TCPRoute legacy by DatabaseExposure/legacy, " +
			"TLSRoute billing [billing.postgres.acme.example.test billing.acme.example.test] by DatabaseExposure/billing, " +
			"TLSRoute cache [cache.redis.acme.example.test cache.acme.example.test] by DatabaseExposure/cache, "
		orders := "TLSRoute orders [orders.postgres.acme.example.test orders.acme.example.test] by DatabaseExposure/orders"
		before := settledApplies(t, c)
		create(dbx("ledger", v1alpha1.EnginePostgres, 5432))
		expect(t, "ledger's route", rendered+"TLSRoute ledger [ledger.postgres.acme.example.test ledger.acme.example.test] by DatabaseExposure/ledger, "+orders)
		// One apply, the route's: the start of a pass (applyNew) takes only what the render
		// made anew, not the routes applied before, and the sweep after it leaves it alone.
		if n := settledApplies(t, c) - before; n != 1 {
			t.Errorf("%d server-side applies for one new exposure, want 1 (its route)", n)
		}
		if err := cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "ledger"}}); err != nil {
			t.Fatal(err)
		}
		expect(t, "ledger gone", rendered+orders)
	})

	t.Run("deleting one release removes only its route; the last one takes the listener", func(t *testing.T) {
		if err := cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders"}}); err != nil {
			t.Fatal(err)
		}
		expect(t, "orders gone", "tls-postgres:5432 tls-redis:6379 tcp-legacy:13306 service[80,5432,6379,13306] | "+
			"TCPRoute legacy by DatabaseExposure/legacy, "+
			"TLSRoute billing [billing.postgres.acme.example.test billing.acme.example.test] by DatabaseExposure/billing, "+
			"TLSRoute cache [cache.redis.acme.example.test cache.acme.example.test] by DatabaseExposure/cache")
		if err := cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "billing"}}); err != nil {
			t.Fatal(err)
		}
		expect(t, "the last PostgreSQL gone: its listener and its Service port", "tls-redis:6379 tcp-legacy:13306 service[80,6379,13306] | "+
			"TCPRoute legacy by DatabaseExposure/legacy, "+
			"TLSRoute cache [cache.redis.acme.example.test cache.acme.example.test] by DatabaseExposure/cache")
	})

	t.Run("a conflicting release is refused and gets no route", func(t *testing.T) {
		create(dbx("cache-copy", v1alpha1.EngineRedis, 6379, func(d *v1alpha1.DatabaseExposure) { d.Spec.Release = "cache" }))
		kubetest.Eventually(t, 30*time.Second, "HostnameConflict", func() error {
			var d v1alpha1.DatabaseExposure
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "cache-copy"}, &d); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionAccepted); c == nil || c.Reason != v1alpha1.ReasonHostnameConflict || !strings.Contains(c.Message, "acme/cache") {
				return fmt.Errorf("Accepted %+v", c)
			}
			return nil
		})
		expect(t, "no route for the loser", "tls-redis:6379 tcp-legacy:13306 service[80,6379,13306] | "+
			"TCPRoute legacy by DatabaseExposure/legacy, "+
			"TLSRoute cache [cache.redis.acme.example.test cache.acme.example.test] by DatabaseExposure/cache")
	})

	t.Run("tls.enabled false is refused by the API server", func(t *testing.T) {
		err := cl.Create(ctx, dbx("plain", v1alpha1.EnginePostgres, 5432, func(d *v1alpha1.DatabaseExposure) { d.Spec.TLS.Enabled = ptrTo(false) }))
		if err == nil || !strings.Contains(err.Error(), "spec.tls.enabled") || !strings.Contains(err.Error(), "must speak TLS") {
			t.Errorf("create with tls.enabled false: %v", err)
		}
	})
}

// A DatabaseExposure's spec.certificateRef makes the controller add the external hostnames
// to that cert-manager Certificate's dnsNames, keeping the owner's, and take off only its
// own when the exposure goes.
func TestDatabaseExposureCertificateNames(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...), kubetest.CertManagerCRDs(t)...)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{CRDs: crds}})
	cl, ctx := kc.Client, context.Background()
	for _, o := range []client.Object{
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}, Spec: v1alpha1.TenantGatewaySpec{Apex: "acme.example.test"}},
		// The database's own Certificate, as its chart wrote it.
		&cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders-tls"}, Spec: cmv1.CertificateSpec{
			SecretName: "orders-tls", DNSNames: []string{"orders.acme.svc"}, IssuerRef: cmmeta.IssuerReference{Name: "db-ca", Kind: "Issuer"}}},
		&v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders"}, Spec: v1alpha1.DatabaseExposureSpec{
			Engine: v1alpha1.EnginePostgres, BackendRef: v1alpha1.DatabaseBackendRef{Name: "orders", Port: 5432},
			CertificateRef: &v1alpha1.LocalRef{Name: "orders-tls"}}},
	} {
		if err := cl.Create(ctx, o, client.FieldOwner("helm")); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := New(Config{REST: kc.As(kubetest.ControllerUser), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)
	names := func(want, annotation string) func() error {
		return func() error {
			var crt cmv1.Certificate
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders-tls"}, &crt); err != nil {
				return err
			}
			if got := strings.Join(crt.Spec.DNSNames, " "); got != want || crt.Annotations[AnnotationDNSNamesAdded] != annotation {
				return fmt.Errorf("dnsNames %q (annotation %q), want %q (%q)", got, crt.Annotations[AnnotationDNSNamesAdded], want, annotation)
			}
			if crt.Spec.SecretName != "orders-tls" || crt.Spec.IssuerRef.Name != "db-ca" {
				return fmt.Errorf("the owner's fields changed: %+v", crt.Spec)
			}
			return nil
		}
	}
	kubetest.Eventually(t, 30*time.Second, "the external names added", names(
		"orders.acme.svc orders.acme.example.test orders.postgres.acme.example.test",
		"orders.acme.example.test,orders.postgres.acme.example.test"))
	if err := cl.Delete(ctx, &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders"}}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "only the added names taken off", names("orders.acme.svc", ""))
}

// settledApplies waits until the tenant applier's count of server-side applies has not
// moved for two seconds (every pass of the last change done) and returns it.
func settledApplies(t *testing.T, c *Controller) int64 {
	t.Helper()
	last := c.tenants.applies.Load()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
		n := c.tenants.applies.Load()
		if n == last {
			return n
		}
		last = n
	}
	t.Fatalf("the applier's applies never settled (%d)", last)
	return 0
}
