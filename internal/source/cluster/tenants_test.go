package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/render"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// The controller renders a TenantGateway and makes the cluster match: the Gateway, the
// redirect and cert-manager's objects applied with server-side apply under snigate's field
// manager and owned by the TenantGateway, the status written; a switch of certificate mode
// deletes what is no longer rendered; attached namespaces are stamped and unstamped; an
// object of the same name it does not own is never overwritten. It runs as the install's
// ServiceAccount: a missing permission fails the test.
func TestTenantGatewayOnRealAPIServer(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	crds = append(crds, kubetest.CertManagerCRDs(t)...)
	// The controller-manager's garbage collector runs: deleting the TenantGateway really
	// removes what it owns.
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
	cert := testutil.NewCA(t).Issue(t, "acme.example.test", "*.acme.example.test")
	create(
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "wildcard"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: cert.CertPEM, corev1.TLSPrivateKeyKey: cert.KeyPEM}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}, Spec: v1alpha1.TenantGatewaySpec{
			Apex: "acme.example.test",
			Certificates: v1alpha1.Certificates{Mode: v1alpha1.CertificatesDNS01,
				IssuerRef: &cmmeta.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer"}},
			TLSPassthroughServices:  []string{"vault"},
			TLSPassthroughListeners: []v1alpha1.PassthroughListener{{Name: "pg", Port: 15432, Hostname: "*.pg.acme.example.test"}},
			AttachedNamespaces:      []string{"monitoring"},
		}},
		&gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "app"}, Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "acme"}}},
			Hostnames:       []gwv1.Hostname{"app.acme.example.test"},
		}},
	)

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := New(Config{REST: kc.As(kubetest.ControllerUser), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)
	const timeout = 30 * time.Second
	var tgw v1alpha1.TenantGateway
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &tgw); err != nil {
		t.Fatal(err)
	}
	owned := func(o metav1.Object) error {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.UID != tgw.UID || ref.Kind != "TenantGateway" {
			return fmt.Errorf("%s: controller %+v, want the TenantGateway (uid %s)", o.GetName(), ref, tgw.UID)
		}
		if !slices.ContainsFunc(o.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool {
			return m.Manager == FieldManager && m.Operation == metav1.ManagedFieldsOperationApply
		}) {
			return fmt.Errorf("%s: not applied by field manager %s", o.GetName(), FieldManager)
		}
		return nil
	}
	// inventory is every object of the kinds a TenantGateway renders, in every namespace
	// ("Kind namespace/name", sorted), and the tree labels of every namespace that has
	// any: each step below lists exactly what must exist, so a leftover fails it.
	inventory := func() (objects, stamps string, err error) {
		var all []string
		var gws gwv1.GatewayList
		var hrs gwv1.HTTPRouteList
		var iss cmv1.IssuerList
		var crts cmv1.CertificateList
		var nss corev1.NamespaceList
		for _, l := range []client.ObjectList{&gws, &hrs, &iss, &crts, &nss} {
			if err := cl.List(ctx, l); err != nil {
				return "", "", err
			}
		}
		for _, o := range gws.Items {
			all = append(all, "Gateway "+o.Namespace+"/"+o.Name)
		}
		for _, o := range hrs.Items {
			all = append(all, "HTTPRoute "+o.Namespace+"/"+o.Name)
		}
		for _, o := range iss.Items {
			all = append(all, "Issuer "+o.Namespace+"/"+o.Name)
		}
		for _, o := range crts.Items {
			all = append(all, "Certificate "+o.Namespace+"/"+o.Name)
		}
		slices.Sort(all)
		var st []string
		for _, ns := range nss.Items {
			gw, host, by := ns.Labels[render.LabelGateway], ns.Labels[render.LabelHost], ns.Annotations[AnnotationStampedBy]
			if gw+host+by != "" {
				st = append(st, fmt.Sprintf("%s(gateway=%s host=%s by=%s)", ns.Name, gw, host, by))
			}
		}
		return strings.Join(all, ", "), strings.Join(st, " "), nil
	}
	expect := func(t *testing.T, what, wantObjects, wantStamps string) {
		t.Helper()
		sorted := strings.Split(wantObjects, ", ")
		slices.Sort(sorted)
		wantObjects = strings.Join(sorted, ", ")
		kubetest.Eventually(t, 60*time.Second, what, func() error {
			got, stamps, err := inventory()
			if err != nil {
				return err
			}
			if got != wantObjects {
				return fmt.Errorf("objects\n  %s\nwant\n  %s", got, wantObjects)
			}
			if stamps != wantStamps {
				return fmt.Errorf("namespace stamps\n  %s\nwant\n  %s", stamps, wantStamps)
			}
			return nil
		})
	}
	update := func(t *testing.T, change func(*v1alpha1.TenantGateway)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur v1alpha1.TenantGateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &cur); err != nil {
				return err
			}
			change(&cur)
			return cl.Update(ctx, &cur)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	const (
		stampAcme       = "acme(gateway=acme host=acme.example.test by=acme/acme)"
		stampMonitoring = "monitoring(gateway=acme host= by=acme/acme)"
		stampShop       = "acme-shop(gateway=acme host=shop.acme.example.test by=)"
	)
	// The Certificate of the app's HTTPS listener in http01 mode: <tgw>-https-<first
	// label>-<8 hex of sha256(hostname)>.
	sum := sha256.Sum256([]byte("app.acme.example.test"))
	appCert := "acme-https-app-" + hex.EncodeToString(sum[:])[:8]

	t.Run("dns01 renders the Gateway, the redirect and one wildcard Certificate", func(t *testing.T) {
		kubetest.Eventually(t, timeout, "rendered objects", func() error {
			var gw gwv1.Gateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &gw); err != nil {
				return err
			}
			if err := owned(&gw); err != nil {
				return err
			}
			var names []string
			for _, l := range gw.Spec.Listeners {
				names = append(names, string(l.Name))
			}
			if want := "http https https-apex tls-vault tls-pg"; strings.Join(names, " ") != want {
				return fmt.Errorf("listeners %v, want %s", names, want)
			}
			var rd gwv1.HTTPRoute
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme-http-redirect"}, &rd); err != nil {
				return err
			}
			if err := owned(&rd); err != nil {
				return err
			}
			var crt cmv1.Certificate
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme-wildcard"}, &crt); err != nil {
				return err
			}
			if err := owned(&crt); err != nil {
				return err
			}
			if got := strings.Join(crt.Spec.DNSNames, ","); got != "acme.example.test,*.acme.example.test" || crt.Spec.IssuerRef.Name != "letsencrypt" {
				return fmt.Errorf("Certificate dnsNames %s issuer %+v", got, crt.Spec.IssuerRef)
			}
			return nil
		})
		// No Issuer: spec.certificates.issuerRef names one. The tenant's and the attached
		// namespaces are stamped.
		expect(t, "dns01 objects", "Certificate acme/acme-wildcard, Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app",
			stampAcme+" "+stampMonitoring)
	})

	t.Run("the status says what was rendered and why it is not ready", func(t *testing.T) {
		kubetest.Eventually(t, timeout, "TenantGateway status", func() error {
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &tgw); err != nil {
				return err
			}
			st := tgw.Status
			if st.ObservedGeneration != tgw.Generation || st.ListenerCount != 5 || len(st.Listeners) != 5 {
				return fmt.Errorf("status %+v", st)
			}
			if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAccepted) {
				return fmt.Errorf("not Accepted: %+v", st.Conditions)
			}
			// cert-manager's CRDs are here but cert-manager is not: the wildcard Secret the
			// Certificate would fill does not exist, so the HTTPS listeners are not programmed.
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
			if c == nil || c.Reason != v1alpha1.ReasonListenersNotReady || !strings.Contains(c.Message, "https") {
				return fmt.Errorf("Ready %+v, want ListenersNotReady naming the https listeners", c)
			}
			return nil
		})
	})

	t.Run("a Certificate deleted by hand is put back", func(t *testing.T) {
		// First let the applier settle (no pass for 2 s), so that nothing but the deletion
		// itself can trigger the next one: the watch on owned Certificates.
		settled := time.Now().Add(timeout)
		for last := c.tenants.passes.Load(); ; {
			time.Sleep(2 * time.Second)
			now := c.tenants.passes.Load()
			if now == last {
				break
			}
			if time.Now().After(settled) {
				t.Fatalf("the tenant applier never settled (%d passes)", now)
			}
			last = now
		}
		if err := cl.Delete(ctx, &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme-wildcard"}}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "Certificate acme-wildcard back", func() error {
			var crt cmv1.Certificate
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme-wildcard"}, &crt); err != nil {
				return err
			}
			return owned(&crt)
		})
	})

	t.Run("http01 renders an ACME Issuer and one Certificate per HTTPS hostname, and deletes the wildcard", func(t *testing.T) {
		update(t, func(tg *v1alpha1.TenantGateway) {
			tg.Spec.Certificates = v1alpha1.Certificates{Mode: v1alpha1.CertificatesHTTP01,
				ACME: &v1alpha1.ACMEIssuer{Server: "https://acme.invalid/directory", Email: "ops@acme.example.test"}}
		})
		expect(t, "http01 objects", "Certificate acme/"+appCert+", Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app, Issuer acme/acme-acme",
			stampAcme+" "+stampMonitoring)
		var crt cmv1.Certificate
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: appCert}, &crt); err != nil {
			t.Fatal(err)
		}
		if err := owned(&crt); err != nil || strings.Join(crt.Spec.DNSNames, ",") != "app.acme.example.test" || crt.Spec.IssuerRef.Name != "acme-acme" {
			t.Errorf("Certificate %s: %v, dnsNames %v, issuer %+v", appCert, err, crt.Spec.DNSNames, crt.Spec.IssuerRef)
		}
	})

	t.Run("existingSecret deletes every cert-manager object and serves the Secret; unattaching unstamps", func(t *testing.T) {
		update(t, func(tg *v1alpha1.TenantGateway) {
			tg.Spec.Certificates = v1alpha1.Certificates{Mode: v1alpha1.CertificatesExistingSecret, WildcardSecretRef: &v1alpha1.SecretRef{Name: "wildcard"}}
			tg.Spec.AttachedNamespaces = nil
		})
		expect(t, "existingSecret objects", "Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app", stampAcme)
		kubetest.Eventually(t, timeout, "Ready", func() error {
			var cur v1alpha1.TenantGateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &cur); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("Ready %+v", c)
			}
			return nil
		})
	})

	t.Run("a child namespace adds its apex to the listeners and the wildcard Certificate; leaving the tree removes it", func(t *testing.T) {
		listeners := func() (string, error) {
			var gw gwv1.Gateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &gw); err != nil {
				return "", err
			}
			var hosts []string
			for _, l := range gw.Spec.Listeners {
				if l.Hostname != nil && l.Protocol == gwv1.HTTPSProtocolType {
					hosts = append(hosts, string(*l.Hostname))
				}
			}
			return strings.Join(hosts, " "), nil
		}
		wantListeners := func(want string) func() error {
			return func() error {
				got, err := listeners()
				if err == nil && got != want {
					err = fmt.Errorf("HTTPS listeners %q, want %q", got, want)
				}
				return err
			}
		}
		create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme-shop",
			Labels: map[string]string{"snigate.dev/gateway": "acme", "snigate.dev/host": "shop.acme.example.test"}}})
		kubetest.Eventually(t, timeout, "the child's listener", wantListeners("*.acme.example.test acme.example.test *.shop.acme.example.test"))
		expect(t, "existingSecret objects with a child", "Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app", stampAcme+" "+stampShop)

		// In dns01 mode the child's apex is in the one wildcard Certificate.
		update(t, func(tg *v1alpha1.TenantGateway) {
			tg.Spec.Certificates = v1alpha1.Certificates{Mode: v1alpha1.CertificatesDNS01,
				IssuerRef: &cmmeta.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer"}}
		})
		wildcardNames := func(want string) func() error {
			return func() error {
				var crt cmv1.Certificate
				if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme-wildcard"}, &crt); err != nil {
					return err
				}
				if got := strings.Join(crt.Spec.DNSNames, ","); got != want {
					return fmt.Errorf("dnsNames %s, want %s", got, want)
				}
				return nil
			}
		}
		kubetest.Eventually(t, timeout, "the child in the wildcard Certificate", wildcardNames("acme.example.test,*.acme.example.test,*.shop.acme.example.test"))
		expect(t, "dns01 objects with a child", "Certificate acme/acme-wildcard, Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app", stampAcme+" "+stampShop)

		var ns corev1.Namespace
		if err := cl.Get(ctx, client.ObjectKey{Name: "acme-shop"}, &ns); err != nil {
			t.Fatal(err)
		}
		delete(ns.Labels, "snigate.dev/gateway")
		if err := cl.Update(ctx, &ns); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "the child's listener gone", wantListeners("*.acme.example.test acme.example.test"))
		kubetest.Eventually(t, timeout, "the child gone from the wildcard Certificate", wildcardNames("acme.example.test,*.acme.example.test"))
		expect(t, "dns01 objects without the child", "Certificate acme/acme-wildcard, Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app",
			stampAcme+" acme-shop(gateway= host=shop.acme.example.test by=)")
	})

	nameInUse := func(t *testing.T, ns, name, naming string) {
		t.Helper()
		kubetest.Eventually(t, timeout, "NameInUse", func() error {
			var cur v1alpha1.TenantGateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cur); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonNameInUse || !strings.Contains(c.Message, naming) {
				return fmt.Errorf("Ready %+v, want NameInUse naming %s", c, naming)
			}
			return nil
		})
	}
	const acmeObjects = "Certificate acme/acme-wildcard, Gateway acme/acme, HTTPRoute acme/acme-http-redirect, HTTPRoute acme/app"
	acmeStamps := stampAcme + " acme-shop(gateway= host=shop.acme.example.test by=)"

	t.Run("a Gateway it does not own is never overwritten", func(t *testing.T) {
		create(
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "taken"}},
			&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "taken", Name: "taken"}, Spec: gwv1.GatewaySpec{
				GatewayClassName: "snigate",
				Listeners:        []gwv1.Listener{{Name: "mine", Port: 8443, Protocol: gwv1.TLSProtocolType, TLS: &gwv1.ListenerTLSConfig{Mode: ptrTo(gwv1.TLSModePassthrough)}}},
			}},
			&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "taken", Name: "taken"}, Spec: v1alpha1.TenantGatewaySpec{
				Apex: "taken.example.test", Certificates: v1alpha1.Certificates{Mode: v1alpha1.CertificatesExistingSecret, WildcardSecretRef: &v1alpha1.SecretRef{Name: "w"}},
			}},
		)
		nameInUse(t, "taken", "taken", "Gateway taken/taken")
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "taken", Name: "taken"}, &gw); err != nil {
			t.Fatal(err)
		}
		if len(gw.Spec.Listeners) != 1 || gw.Spec.Listeners[0].Name != "mine" || metav1.GetControllerOf(&gw) != nil {
			t.Errorf("the foreign Gateway was changed: %+v", gw.Spec.Listeners)
		}
		// Nothing else was rendered for it, and its namespace is stamped (the tree labels
		// do not depend on the Gateway).
		expect(t, "objects with taken", acmeObjects+", Gateway taken/taken", acmeStamps+" taken(gateway=taken host=taken.example.test by=taken/taken)")
	})

	t.Run("a Certificate it does not own is never overwritten; once it is gone the TenantGateway renders", func(t *testing.T) {
		create(
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "beta"}},
			&cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "beta", Name: "beta-wildcard"}, Spec: cmv1.CertificateSpec{
				SecretName: "someone-elses", DNSNames: []string{"else.example.test"}, IssuerRef: cmmeta.IssuerReference{Name: "x"}}},
			&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "beta", Name: "beta"}, Spec: v1alpha1.TenantGatewaySpec{
				Apex: "beta.example.test", Certificates: v1alpha1.Certificates{Mode: v1alpha1.CertificatesDNS01,
					IssuerRef: &cmmeta.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer"}},
			}},
		)
		nameInUse(t, "beta", "beta", "Certificate beta/beta-wildcard")
		var crt cmv1.Certificate
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "beta", Name: "beta-wildcard"}, &crt); err != nil {
			t.Fatal(err)
		}
		if crt.Spec.SecretName != "someone-elses" || metav1.GetControllerOf(&crt) != nil {
			t.Errorf("the foreign Certificate was changed: %+v", crt.Spec)
		}
		const betaStamp = " beta(gateway=beta host=beta.example.test by=beta/beta)"
		expect(t, "objects with beta refused", acmeObjects+", Certificate beta/beta-wildcard, Gateway taken/taken",
			acmeStamps+betaStamp+" taken(gateway=taken host=taken.example.test by=taken/taken)")

		// Its deletion alone (a watched event) lets the TenantGateway render.
		if err := cl.Delete(ctx, &crt); err != nil {
			t.Fatal(err)
		}
		expect(t, "objects with beta rendered", acmeObjects+", Certificate beta/beta-wildcard, Gateway beta/beta, Gateway taken/taken, HTTPRoute beta/beta-http-redirect",
			acmeStamps+betaStamp+" taken(gateway=taken host=taken.example.test by=taken/taken)")
		var beta v1alpha1.TenantGateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "beta", Name: "beta"}, &beta); err != nil {
			t.Fatal(err)
		}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "beta", Name: "beta-wildcard"}, &crt); err != nil || metav1.GetControllerOf(&crt) == nil || metav1.GetControllerOf(&crt).UID != beta.UID {
			t.Errorf("beta-wildcard after the foreign one went: %v, controller %+v", err, metav1.GetControllerOf(&crt))
		}
	})

	t.Run("deleting the TenantGateway removes exactly what it owned", func(t *testing.T) {
		if err := cl.Delete(ctx, &v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}}); err != nil {
			t.Fatal(err)
		}
		// The garbage collector takes its Gateway, redirect and Certificate; the route the
		// tenant wrote, the other tenants' objects and the foreign Gateway stay; its own
		// namespace is unstamped; the child's host label, which it never wrote, stays.
		expect(t, "objects after the delete", "Certificate beta/beta-wildcard, Gateway beta/beta, Gateway taken/taken, HTTPRoute acme/app, HTTPRoute beta/beta-http-redirect",
			"acme-shop(gateway= host=shop.acme.example.test by=) beta(gateway=beta host=beta.example.test by=beta/beta) taken(gateway=taken host=taken.example.test by=taken/taken)")
		var sec corev1.Secret
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "wildcard"}, &sec); err != nil {
			t.Errorf("the wildcard Secret: %v", err)
		}
	})
}

// Without cert-manager's CRDs the controller still runs: a dns01 TenantGateway gets its
// Gateway, its passthrough listeners serve, and its HTTPS listeners say
// CertManagerNotInstalled.
func TestTenantGatewayWithoutCertManager(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{CRDs: crds}})
	cl, ctx := kc.Client, context.Background()
	for _, o := range []client.Object{
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		&v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}, Spec: v1alpha1.TenantGatewaySpec{
			Apex:                   "acme.example.test",
			Certificates:           v1alpha1.Certificates{Mode: v1alpha1.CertificatesDNS01, IssuerRef: &cmmeta.IssuerReference{Name: "letsencrypt", Kind: "ClusterIssuer"}},
			TLSPassthroughServices: []string{"vault"},
		}},
	} {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := New(Config{REST: kc.As(kubetest.ControllerUser), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, c)
	kubetest.Eventually(t, 30*time.Second, "listener reasons", func() error {
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &gw); err != nil {
			return err
		}
		var tgw v1alpha1.TenantGateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &tgw); err != nil {
			return err
		}
		var got []string
		for _, l := range tgw.Status.Listeners {
			got = append(got, fmt.Sprintf("%s:%v:%s", l.Name, l.Ready, l.Reason))
		}
		want := "http:true:, https:false:CertManagerNotInstalled, https-apex:false:CertManagerNotInstalled, tls-vault:true:"
		if strings.Join(got, ", ") != want {
			return fmt.Errorf("listeners %v, want %s", got, want)
		}
		if c := meta.FindStatusCondition(tgw.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "https") {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
}
