// Package platform builds, in memory, the shapes of bench/cpscale: TenantGateways by the
// hundred with their DatabaseExposures, for the benchmarks of the stages a change goes
// through (render, the pipeline) without an API server.
//
//	res := platform.Build(1000, 10, true) // 1 000 tenants × 10 exposures on one shared Gateway
//
// What a cluster also holds once the controller applied a first render (the rendered
// routes, ListenerSets and Gateways) is the caller's to add: Build cannot render without
// importing the renderer it benchmarks.
package platform

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
)

// Shape is one of bench/cpscale's steps: Tenants TenantGateways of Per DatabaseExposures,
// on the shared Gateway or not.
type Shape struct {
	Name         string
	Tenants, Per int
	Shared       bool
}

// Shapes are the steps the benchmarks of the stages measure: a hundred and a thousand
// tenants on the shared Gateway, and one tenant of 10 000 exposures.
var Shapes = []Shape{
	{"shared/100x10", 100, 10, true},
	{"shared/1000x10", 1000, 10, true},
	{"one/1x10000", 1, 10000, false},
}

// Build returns tenants TenantGateways (on one shared Gateway, platform/shared, when shared)
// with per DatabaseExposures each, their namespaces, Services and TrustAnchors, with UIDs
// as a cluster's objects have.
func Build(tenants, per int, shared bool) *resources.Resources {
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
			res.DatabaseExposures = append(res.DatabaseExposures, Exposure(ns, fmt.Sprintf("db-%d", j)))
		}
	}
	return res
}

// Exposure is one more DatabaseExposure of Build's kind: Redis on Service db, in namespace
// ns, with the defaults the API server applies on create (spec.tls.enabled).
func Exposure(ns, name string) *v1alpha1.DatabaseExposure {
	enabled := true
	return &v1alpha1.DatabaseExposure{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("DatabaseExposure/" + ns + "/" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Spec: v1alpha1.DatabaseExposureSpec{Engine: v1alpha1.EngineRedis, BackendRef: v1alpha1.DatabaseBackendRef{Name: "db", Port: 6379},
			TrustAnchorRef: &v1alpha1.LocalRef{Name: "db-ca"}, TLS: v1alpha1.DatabaseTLS{Enabled: &enabled}},
	}
}

// Sort puts every kind of res in namespace/name order, the order the cluster source lists
// them in (the render stage compares its input with the last one's in that order).
func Sort(res *resources.Resources) {
	for _, k := range resources.Kinds {
		objs := k.Objects(res)
		slices.SortFunc(objs, resources.Compare)
		k.Set(res, objs)
	}
}

// WithExposure is res and one more DatabaseExposure, in its place in namespace/name order,
// as the cluster source lists a new one: res itself is not changed.
func WithExposure(res *resources.Resources, x *v1alpha1.DatabaseExposure) *resources.Resources {
	more := *res
	at, _ := slices.BinarySearchFunc(res.DatabaseExposures, x, resources.Compare)
	more.DatabaseExposures = slices.Insert(slices.Clip(res.DatabaseExposures), at, x)
	return &more
}
