package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
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
	crds := append(kubetest.StandardCRDs(t), filepath.Join(kubetest.RepoRoot(t), "config", "crd", "snigate", "snigate.dev_tenantgateways.yaml"))
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
			var issuers cmv1.IssuerList
			if err := cl.List(ctx, &issuers, client.InNamespace("acme")); err != nil || len(issuers.Items) != 0 {
				return fmt.Errorf("issuers %d (%v), want none with issuerRef", len(issuers.Items), err)
			}
			return nil
		})
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

	t.Run("the tenant's and the attached namespaces are stamped", func(t *testing.T) {
		kubetest.Eventually(t, timeout, "acme and monitoring stamped", func() error {
			var ns corev1.Namespace
			if err := cl.Get(ctx, client.ObjectKey{Name: "monitoring"}, &ns); err != nil {
				return err
			}
			if ns.Labels["snigate.dev/gateway"] != "acme" || ns.Labels["snigate.dev/host"] != "" || ns.Annotations[AnnotationStampedBy] != "acme/acme" {
				return fmt.Errorf("monitoring: labels %v annotations %v", ns.Labels, ns.Annotations)
			}
			if err := cl.Get(ctx, client.ObjectKey{Name: "acme"}, &ns); err != nil {
				return err
			}
			if ns.Labels["snigate.dev/gateway"] != "acme" || ns.Labels["snigate.dev/host"] != "acme.example.test" || ns.Annotations[AnnotationStampedBy] != "acme/acme" {
				return fmt.Errorf("acme: labels %v annotations %v", ns.Labels, ns.Annotations)
			}
			return nil
		})
	})

	t.Run("existingSecret deletes the Certificate and serves the Secret; unattaching unstamps", func(t *testing.T) {
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &tgw); err != nil {
			t.Fatal(err)
		}
		tgw.Spec.Certificates = v1alpha1.Certificates{Mode: v1alpha1.CertificatesExistingSecret, WildcardSecretRef: &v1alpha1.SecretRef{Name: "wildcard"}}
		tgw.Spec.AttachedNamespaces = nil
		if err := cl.Update(ctx, &tgw); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "Certificate gone, Ready", func() error {
			var crt cmv1.Certificate
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme-wildcard"}, &crt); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Certificate acme-wildcard still there (%v)", err)
			}
			var cur v1alpha1.TenantGateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "acme"}, &cur); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("Ready %+v", c)
			}
			var ns corev1.Namespace
			if err := cl.Get(ctx, client.ObjectKey{Name: "monitoring"}, &ns); err != nil {
				return err
			}
			if _, ok := ns.Labels["snigate.dev/gateway"]; ok {
				return errors.New("monitoring still stamped")
			}
			return nil
		})
	})

	t.Run("a child namespace adds its apex's listener; leaving the tree removes it", func(t *testing.T) {
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
		create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme-shop",
			Labels: map[string]string{"snigate.dev/gateway": "acme", "snigate.dev/host": "shop.acme.example.test"}}})
		kubetest.Eventually(t, timeout, "the child's listener", func() error {
			got, err := listeners()
			if err == nil && got != "*.acme.example.test acme.example.test *.shop.acme.example.test" {
				err = fmt.Errorf("HTTPS listeners %q", got)
			}
			return err
		})
		var ns corev1.Namespace
		if err := cl.Get(ctx, client.ObjectKey{Name: "acme-shop"}, &ns); err != nil {
			t.Fatal(err)
		}
		delete(ns.Labels, "snigate.dev/gateway")
		if err := cl.Update(ctx, &ns); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "the child's listener gone", func() error {
			got, err := listeners()
			if err == nil && got != "*.acme.example.test acme.example.test" {
				err = fmt.Errorf("HTTPS listeners %q", got)
			}
			return err
		})
	})

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
		kubetest.Eventually(t, timeout, "NameInUse", func() error {
			var cur v1alpha1.TenantGateway
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "taken", Name: "taken"}, &cur); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonNameInUse {
				return fmt.Errorf("Ready %+v, want NameInUse", c)
			}
			return nil
		})
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "taken", Name: "taken"}, &gw); err != nil {
			t.Fatal(err)
		}
		if len(gw.Spec.Listeners) != 1 || gw.Spec.Listeners[0].Name != "mine" || metav1.GetControllerOf(&gw) != nil {
			t.Errorf("the foreign Gateway was changed: %+v", gw.Spec.Listeners)
		}
	})

	t.Run("deleting the TenantGateway removes exactly what it owned", func(t *testing.T) {
		if err := cl.Delete(ctx, &v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme"}}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 60*time.Second, "owned objects collected", func() error {
			var gws gwv1.GatewayList
			if err := cl.List(ctx, &gws, client.InNamespace("acme")); err != nil || len(gws.Items) != 0 {
				return fmt.Errorf("Gateways left in acme: %d (%v)", len(gws.Items), err)
			}
			var hrs gwv1.HTTPRouteList
			if err := cl.List(ctx, &hrs, client.InNamespace("acme")); err != nil || len(hrs.Items) != 0 {
				return fmt.Errorf("HTTPRoutes left in acme: %d (%v)", len(hrs.Items), err)
			}
			return nil
		})
		// Its namespace's tree labels go with it.
		kubetest.Eventually(t, timeout, "acme unstamped", func() error {
			var ns corev1.Namespace
			if err := cl.Get(ctx, client.ObjectKey{Name: "acme"}, &ns); err != nil {
				return err
			}
			if len(ns.Labels["snigate.dev/host"]+ns.Labels["snigate.dev/gateway"]+ns.Annotations[AnnotationStampedBy]) != 0 {
				return fmt.Errorf("acme: labels %v annotations %v", ns.Labels, ns.Annotations)
			}
			return nil
		})
		// What the TenantGateway did not own stays: its wildcard Secret, the foreign Gateway.
		var sec corev1.Secret
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "wildcard"}, &sec); err != nil {
			t.Errorf("the wildcard Secret: %v", err)
		}
		var gw gwv1.Gateway
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "taken", Name: "taken"}, &gw); err != nil {
			t.Errorf("the foreign Gateway: %v", err)
		}
	})
}
