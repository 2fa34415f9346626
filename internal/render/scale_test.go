package render

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
)

// platform is the input of bench/cpscale's shapes, built in memory: tenants TenantGateways
// (on one shared Gateway when shared) with per DatabaseExposures each, their namespaces,
// Services and TrustAnchors, and, as a cluster holds them once the controller has applied
// them, the routes a previous render made.
func platform(tenants, per int, shared bool) *resources.Resources {
	res := &resources.Resources{}
	created := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	res.GatewayClasses = append(res.GatewayClasses, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "snigate"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "snigate.dev/gateway-controller"}})
	res.Namespaces = append(res.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}})
	all := gwv1.NamespacesFromAll
	res.Gateways = append(res.Gateways, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "shared"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "snigate", AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &all}},
			Listeners: []gwv1.Listener{{Name: "platform", Port: 18080, Protocol: gwv1.HTTPProtocolType}}}})
	for i := range tenants {
		ns := fmt.Sprintf("t-%04d", i)
		uid := func(kind, name string) types.UID { return types.UID(kind + "/" + ns + "/" + name) }
		res.Namespaces = append(res.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		tg := &v1alpha1.TenantGateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns, UID: uid("TenantGateway", ns), CreationTimestamp: created},
			Spec: v1alpha1.TenantGatewaySpec{Apex: ns + ".example.test", DatabaseHostnames: v1alpha1.DatabaseHostnamesSubdomain}}
		if shared {
			tg.Spec.ParentGatewayRef = &v1alpha1.ParentGatewayReference{Namespace: "platform", Name: "shared"}
		}
		res.TenantGateways = append(res.TenantGateways, tg)
		res.Secrets = append(res.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-ca"}})
		res.TrustAnchors = append(res.TrustAnchors, &v1alpha1.TrustAnchor{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-ca", UID: uid("TrustAnchor", "db-ca")},
			Spec: v1alpha1.TrustAnchorSpec{SourceSecretRef: v1alpha1.SourceSecretRef{Name: "db-ca"}}})
		res.Services = append(res.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "redis", Port: 6379}}}})
		for j := range per {
			name := fmt.Sprintf("db-%d", j)
			res.DatabaseExposures = append(res.DatabaseExposures, &v1alpha1.DatabaseExposure{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid("DatabaseExposure", name), CreationTimestamp: created},
				Spec: v1alpha1.DatabaseExposureSpec{Engine: v1alpha1.EngineRedis, BackendRef: v1alpha1.DatabaseBackendRef{Name: "db", Port: 6379},
					TrustAnchorRef: &v1alpha1.LocalRef{Name: "db-ca"}}})
		}
	}
	// What the cluster holds after the controller applied the first render.
	first := Render(res, Options{Now: now})
	res.ListenerSets = append(res.ListenerSets, first.ListenerSets...)
	res.Gateways = append(res.Gateways, first.Gateways...)
	res.HTTPRoutes = append(res.HTTPRoutes, first.HTTPRoutes...)
	res.TLSRoutes = append(res.TLSRoutes, first.TLSRoutes...)
	return res
}

// BenchmarkRender renders the platform again after one more exposure, as a controller does
// on each change: with the previous result, whose unchanged objects come back as the same
// pointers.
func BenchmarkRender(b *testing.B) {
	for _, c := range []struct {
		name         string
		tenants, per int
		shared       bool
	}{
		{"shared/100x10", 100, 10, true},
		{"shared/1000x10", 1000, 10, true},
		{"one/1x10000", 1, 10000, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			res := platform(c.tenants, c.per, c.shared)
			prev := Render(res, Options{Now: now})
			more := *res
			more.DatabaseExposures = append(res.DatabaseExposures[:len(res.DatabaseExposures):len(res.DatabaseExposures)],
				&v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "t-0000", Name: "new", UID: "new"},
					Spec: v1alpha1.DatabaseExposureSpec{Engine: v1alpha1.EngineRedis, BackendRef: v1alpha1.DatabaseBackendRef{Name: "db", Port: 6379}}})
			b.ResetTimer()
			for b.Loop() {
				out := Render(&more, Options{Now: now, Previous: prev})
				if len(out.TLSRoutes) != c.tenants*c.per+1 {
					b.Fatalf("%d routes rendered, want %d", len(out.TLSRoutes), c.tenants*c.per+1)
				}
			}
		})
	}
}
