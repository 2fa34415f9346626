package cluster

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/testutil"
	"github.com/snigate/snigate/internal/testutil/kubetest"
)

// A TrustAnchor publishes its source's CA, and only it, as <release>.tenant-ca, readable by
// its readers (impersonated here) and by nobody else, while the source stays unreadable to
// them; a deleted projection comes back, a rotated source updates it, a name someone else
// holds is never overwritten (NameCollision and a Warning event), a leaf is refused (NotACA)
// while the previous bundle stays, and deleting the TrustAnchor collects what it published.
func TestTrustAnchorOnRealAPIServer(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	crds := append(kubetest.StandardCRDs(t), kubetest.SnigateCRDs(t)...)
	kc := kubetest.StartCluster(t, kubetest.ClusterOptions{Scheme: scheme, Options: kubetest.Options{CRDs: crds, GarbageCollector: true}})
	cl, ctx := kc.Client, context.Background()
	ca, next := testutil.NewCA(t), testutil.NewCA(t)
	leaf := ca.Issue(t, "db.acme.example.test")
	source := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "db-ca"}, Data: map[string][]byte{
		"ca.crt": ca.CertPEM, "ca.key": []byte("-----BEGIN PRIVATE KEY-----\nnot for tenants\n-----END PRIVATE KEY-----\n"),
	}}
	for _, o := range []client.Object{
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"}, Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}},
		source,
		&v1alpha1.TrustAnchor{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders-ca"}, Spec: v1alpha1.TrustAnchorSpec{
			Release: "orders", SourceSecretRef: v1alpha1.SourceSecretRef{Name: "db-ca"},
			Readers: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
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
	const timeout = 30 * time.Second
	alice, err := client.New(kc.As("alice"), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// published is the bundle's certificates as PEM blocks (Secret orders.tenant-ca).
	published := func() ([]byte, *corev1.Secret, error) {
		var s corev1.Secret
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders.tenant-ca"}, &s); err != nil {
			return nil, nil, err
		}
		if len(s.Data) != 1 {
			return nil, &s, fmt.Errorf("keys %v, want ca.crt alone", keys(s.Data))
		}
		return s.Data["ca.crt"], &s, nil
	}
	wantBundle := func(what string, certs ...[]byte) {
		t.Helper()
		kubetest.Eventually(t, timeout, what, func() error {
			b, _, err := published()
			if err != nil {
				return err
			}
			var got [][]byte
			for rest := b; ; {
				var blk *pem.Block
				blk, rest = pem.Decode(rest)
				if blk == nil {
					break
				}
				got = append(got, blk.Bytes)
			}
			if len(got) != len(certs) {
				return fmt.Errorf("%d certificates published, want %d", len(got), len(certs))
			}
			for i, want := range certs {
				blk, _ := pem.Decode(want)
				if !bytes.Equal(got[i], blk.Bytes) {
					return fmt.Errorf("certificate %d is not the expected one", i)
				}
			}
			return nil
		})
	}
	ready := func(name, reason string) {
		t.Helper()
		kubetest.Eventually(t, timeout, name+" "+reason, func() error {
			var a v1alpha1.TrustAnchor
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: name}, &a); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != reason {
				return fmt.Errorf("Ready %+v, want %s", c, reason)
			}
			return nil
		})
	}

	t.Run("the CA alone is published, owned, for its readers only", func(t *testing.T) {
		wantBundle("published", ca.CertPEM)
		ready("orders-ca", v1alpha1.ReasonPublished)
		_, s, _ := published()
		if ref := metav1.GetControllerOf(s); ref == nil || ref.Kind != "TrustAnchor" || ref.Name != "orders-ca" || s.Labels["snigate.dev/trust-anchor"] != "orders-ca" {
			t.Errorf("owner %+v labels %v", ref, s.Labels)
		}
		kubetest.Eventually(t, timeout, "alice reads the bundle", func() error {
			var got corev1.Secret
			return alice.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders.tenant-ca"}, &got)
		})
		var got corev1.Secret
		if err := alice.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "db-ca"}, &got); !apierrors.IsForbidden(err) {
			t.Errorf("alice reading the source: %v, want forbidden", err)
		}
		var list corev1.SecretList
		if err := alice.List(ctx, &list, client.InNamespace("acme")); !apierrors.IsForbidden(err) {
			t.Errorf("alice listing Secrets: %v, want forbidden", err)
		}
		bob, _ := client.New(kc.As("bob"), client.Options{Scheme: scheme})
		if err := bob.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders.tenant-ca"}, &got); !apierrors.IsForbidden(err) {
			t.Errorf("bob (no reader) reading the bundle: %v, want forbidden", err)
		}
	})

	t.Run("a deleted projection is recreated within seconds", func(t *testing.T) {
		if err := cl.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders.tenant-ca"}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		wantBundle("recreated", ca.CertPEM)
		t.Logf("recreated after %v", time.Since(start).Round(time.Millisecond))
		if err := cl.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders.tenant-ca-reader"}}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, timeout, "RoleBinding recreated", func() error {
			var rb rbacv1.RoleBinding
			return cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders.tenant-ca-reader"}, &rb)
		})
	})

	t.Run("a rotated source updates the bundle", func(t *testing.T) {
		source.Data["ca.crt"] = next.CertPEM
		if err := cl.Update(ctx, source); err != nil {
			t.Fatal(err)
		}
		// No DatabaseExposure names this TrustAnchor, so no backend serves a chain from the
		// old CA: it goes at once. (With one, it stays while the probe sees the old chain:
		// e2e TestDatabaseExposureCluster.)
		wantBundle("rotated", next.CertPEM)
	})

	t.Run("a leaf is refused and the previous bundle stays", func(t *testing.T) {
		source.Data["ca.crt"] = leaf.CertPEM
		if err := cl.Update(ctx, source); err != nil {
			t.Fatal(err)
		}
		ready("orders-ca", v1alpha1.ReasonNotACA)
		wantBundle("kept", next.CertPEM)
	})

	t.Run("a name someone else holds is never overwritten", func(t *testing.T) {
		foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "billing.tenant-ca"}, Data: map[string][]byte{"x": []byte("mine")}}
		if err := cl.Create(ctx, foreign); err != nil {
			t.Fatal(err)
		}
		if err := cl.Create(ctx, &v1alpha1.TrustAnchor{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "billing"}, Spec: v1alpha1.TrustAnchorSpec{
			SourceSecretRef: v1alpha1.SourceSecretRef{Name: "other-ca"}}}); err != nil {
			t.Fatal(err)
		}
		if err := cl.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "other-ca"}, Data: map[string][]byte{"ca.crt": next.CertPEM}}); err != nil {
			t.Fatal(err)
		}
		ready("billing", v1alpha1.ReasonNameCollision)
		var got corev1.Secret
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "billing.tenant-ca"}, &got); err != nil || string(got.Data["x"]) != "mine" || metav1.GetControllerOf(&got) != nil {
			t.Errorf("the foreign Secret was touched: %v %v", err, got.Data)
		}
		kubetest.Eventually(t, timeout, "a Warning event", func() error {
			var evs eventsv1.EventList
			if err := cl.List(ctx, &evs, client.InNamespace("acme")); err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Regarding.Name == "billing" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "billing.tenant-ca") {
					return nil
				}
			}
			return fmt.Errorf("no Warning event on TrustAnchor billing among %d events", len(evs.Items))
		})
	})

	t.Run("deleting the TrustAnchor removes what it published", func(t *testing.T) {
		if err := cl.Delete(ctx, &v1alpha1.TrustAnchor{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "orders-ca"}}); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 60*time.Second, "collected", func() error {
			var s corev1.Secret
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders.tenant-ca"}, &s); !apierrors.IsNotFound(err) {
				return fmt.Errorf("orders.tenant-ca: %v", err)
			}
			var r rbacv1.Role
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "orders.tenant-ca-reader"}, &r); !apierrors.IsNotFound(err) {
				return fmt.Errorf("Role: %v", err)
			}
			return nil
		})
		var s corev1.Secret
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "acme", Name: "db-ca"}, &s); err != nil {
			t.Errorf("the source: %v", err)
		}
	})
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
