package resources

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Object is an API object of one of the Kinds: a pointer to its Go type (the same method set
// as controller-runtime's client.Object, so either converts to the other).
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list type of one of the Kinds (controller-runtime's client.ObjectList).
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// Kind is one kind of object snigate reads, and everything each stage needs to know of it:
// the file loader decodes by Group, Versions and New; the cluster source lists with NewList
// and watches New; translate's memo compares the objects of every kind that is not a Route;
// the golden tests reverse every kind's objects. A new kind is one entry in Kinds (and its
// field in Resources), nowhere else.
type Kind struct {
	Name string // "Gateway"
	// Group is the API group ("" for the core group).
	Group string
	// Versions are the API versions accepted in files, the served one first: a file that
	// names another version of the group is told to use Versions[0].
	Versions   []string
	Namespaced bool
	// Route marks the kinds translate's memo remembers one object at a time: a change of a
	// route translates that route alone, while a change of any other kind translates all.
	Route bool
	// OwnStatus marks the kinds whose status snigate writes: the cluster source ignores
	// changes to their status (its own writes), only spec, labels and annotations count.
	OwnStatus bool
	// Optional marks the kinds whose CRD a cluster may not have: the cluster source lists and
	// watches them only where the API server serves them, and says so when it does not.
	Optional bool
	// RenderInput marks the kinds only the render stage reads (package render): a read-only
	// data plane, which serves the Gateways the controller rendered and renders nothing
	// itself, neither watches them nor needs the permission to.
	RenderInput bool

	// New returns an empty object of the kind; NewList an empty list of it.
	New     func() Object
	NewList func() ObjectList
	// Objects returns r's objects of the kind, in order (a new slice).
	Objects func(r *Resources) []Object
	// Set replaces r's objects of the kind; every element must be of New's type.
	Set func(r *Resources, objs []Object)
	// Add appends one object, of New's type.
	Add func(r *Resources, obj Object)
	// Diff is DiffSorted of the kind's objects in a and b.
	Diff func(a, b *Resources, changed func(namespace, name string)) bool
}

// Kinds lists every kind snigate reads, in the order error messages name them.
var Kinds = []Kind{
	kind("GatewayClass", gwv1.GroupName, []string{"v1"}, false, false, true,
		func() ObjectList { return &gwv1.GatewayClassList{} }, func(r *Resources) *[]*gwv1.GatewayClass { return &r.GatewayClasses }),
	kind("Gateway", gwv1.GroupName, []string{"v1"}, true, false, true,
		func() ObjectList { return &gwv1.GatewayList{} }, func(r *Resources) *[]*gwv1.Gateway { return &r.Gateways }),
	// Optional: a cluster with Gateway API CRDs older than v1.5 has no ListenerSet.
	optional(kind("ListenerSet", gwv1.GroupName, []string{"v1"}, true, false, true,
		func() ObjectList { return &gwv1.ListenerSetList{} }, func(r *Resources) *[]*gwv1.ListenerSet { return &r.ListenerSets })),
	kind("TLSRoute", gwv1.GroupName, []string{"v1"}, true, true, true,
		func() ObjectList { return &gwv1.TLSRouteList{} }, func(r *Resources) *[]*gwv1.TLSRoute { return &r.TLSRoutes }),
	kind("TCPRoute", gwv1.GroupName, []string{"v1"}, true, true, true,
		func() ObjectList { return &gwv1.TCPRouteList{} }, func(r *Resources) *[]*gwv1.TCPRoute { return &r.TCPRoutes }),
	kind("HTTPRoute", gwv1.GroupName, []string{"v1"}, true, true, true,
		func() ObjectList { return &gwv1.HTTPRouteList{} }, func(r *Resources) *[]*gwv1.HTTPRoute { return &r.HTTPRoutes }),
	// v1beta1.ReferenceGrant is defined as the v1 type: the same schema.
	kind("ReferenceGrant", gwv1.GroupName, []string{"v1", "v1beta1"}, true, false, true,
		func() ObjectList { return &gwv1.ReferenceGrantList{} }, func(r *Resources) *[]*gwv1.ReferenceGrant { return &r.ReferenceGrants }),
	kind("Service", corev1.GroupName, []string{"v1"}, true, false, false,
		func() ObjectList { return &corev1.ServiceList{} }, func(r *Resources) *[]*corev1.Service { return &r.Services }),
	kind("Secret", corev1.GroupName, []string{"v1"}, true, false, false,
		func() ObjectList { return &corev1.SecretList{} }, func(r *Resources) *[]*corev1.Secret { return &r.Secrets }),
	kind("Namespace", corev1.GroupName, []string{"v1"}, false, false, false,
		func() ObjectList { return &corev1.NamespaceList{} }, func(r *Resources) *[]*corev1.Namespace { return &r.Namespaces }),
	kind("EndpointSlice", discoveryv1.GroupName, []string{"v1"}, true, false, false,
		func() ObjectList { return &discoveryv1.EndpointSliceList{} }, func(r *Resources) *[]*discoveryv1.EndpointSlice { return &r.EndpointSlices }),
	renderInput(optional(kind("TenantGateway", v1alpha1.GroupName, []string{"v1alpha1"}, true, false, true,
		func() ObjectList { return &v1alpha1.TenantGatewayList{} }, func(r *Resources) *[]*v1alpha1.TenantGateway { return &r.TenantGateways }))),
	renderInput(optional(kind("DatabaseExposure", v1alpha1.GroupName, []string{"v1alpha1"}, true, false, true,
		func() ObjectList { return &v1alpha1.DatabaseExposureList{} }, func(r *Resources) *[]*v1alpha1.DatabaseExposure { return &r.DatabaseExposures }))),
	renderInput(optional(kind("TrustAnchor", v1alpha1.GroupName, []string{"v1alpha1"}, true, false, true,
		func() ObjectList { return &v1alpha1.TrustAnchorList{} }, func(r *Resources) *[]*v1alpha1.TrustAnchor { return &r.TrustAnchors }))),
	// The policies are translate's, not render's: a data plane reads them (what it writes to
	// backends, what it accepts from load balancers, whom it admits).
	optional(kind("BackendPolicy", v1alpha1.GroupName, []string{"v1alpha1"}, true, false, true,
		func() ObjectList { return &v1alpha1.BackendPolicyList{} }, func(r *Resources) *[]*v1alpha1.BackendPolicy { return &r.BackendPolicies })),
	optional(kind("ListenerPolicy", v1alpha1.GroupName, []string{"v1alpha1"}, true, false, true,
		func() ObjectList { return &v1alpha1.ListenerPolicyList{} }, func(r *Resources) *[]*v1alpha1.ListenerPolicy { return &r.ListenerPolicies })),
	optional(kind("AccessPolicy", v1alpha1.GroupName, []string{"v1alpha1"}, true, false, true,
		func() ObjectList { return &v1alpha1.AccessPolicyList{} }, func(r *Resources) *[]*v1alpha1.AccessPolicy { return &r.AccessPolicies })),
}

func optional(k Kind) Kind { k.Optional = true; return k }

func renderInput(k Kind) Kind { k.RenderInput = true; return k }

// kind defines a Kind whose objects are *T, kept in the Resources field that field returns.
func kind[T any, PT interface {
	*T
	Object
}](name, group string, versions []string, namespaced, route, ownStatus bool,
	newList func() ObjectList, field func(*Resources) *[]PT) Kind {
	return Kind{
		Name: name, Group: group, Versions: versions, Namespaced: namespaced, Route: route, OwnStatus: ownStatus,
		New:     func() Object { return PT(new(T)) },
		NewList: newList,
		Objects: func(r *Resources) []Object {
			s := *field(r)
			out := make([]Object, len(s))
			for i, o := range s {
				out[i] = o
			}
			return out
		},
		Set: func(r *Resources, objs []Object) {
			s := make([]PT, len(objs))
			for i, o := range objs {
				s[i] = o.(PT)
			}
			*field(r) = s
		},
		Add: func(r *Resources, obj Object) {
			f := field(r)
			*f = append(*f, obj.(PT))
		},
		Diff: func(a, b *Resources, changed func(namespace, name string)) bool {
			return DiffSorted(*field(a), *field(b), changed)
		},
	}
}

// KindOf returns the kind of group and name, or nil.
func KindOf(group, name string) *Kind {
	for i := range Kinds {
		if Kinds[i].Group == group && Kinds[i].Name == name {
			return &Kinds[i]
		}
	}
	return nil
}

// KindNames lists the kinds' names, for messages.
func KindNames() []string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = k.Name
	}
	return names
}

// SetList replaces r's objects of kind k with the items of list (of NewList's type): the
// items become the objects, without copying.
func (k *Kind) SetList(r *Resources, list ObjectList) error {
	items, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("%s list: %w", k.Name, err)
	}
	objs := make([]Object, len(items))
	for i, it := range items {
		o, ok := it.(Object)
		if !ok {
			return fmt.Errorf("%s list: item %d is %T", k.Name, i, it)
		}
		objs[i] = o
	}
	k.Set(r, objs)
	return nil
}

// Reversed returns a copy of r with the objects of every kind in reverse order (translate's
// output must not depend on the order of its input).
func Reversed(r *Resources) *Resources {
	out := *r
	for _, k := range Kinds {
		objs := k.Objects(r)
		slices.Reverse(objs)
		k.Set(&out, objs)
	}
	return &out
}

// SameSpec reports whether a and b are the same object as far as translate reads it: the
// same pointer (objects are immutable), or, for a kind whose status snigate writes, the same
// object (UID) at the same generation with the same labels and annotations. A cluster's
// status writes give a Gateway a new resourceVersion, and so a new object, without changing
// anything translate reads (generation counts every spec change of these kinds): they must
// not translate every route again.
func SameSpec(a, b Object, ownStatus bool) bool {
	if a == b {
		return true
	}
	if !ownStatus || a.GetUID() == "" || a.GetUID() != b.GetUID() || a.GetGeneration() != b.GetGeneration() {
		return false
	}
	return maps.Equal(a.GetLabels(), b.GetLabels()) && maps.Equal(a.GetAnnotations(), b.GetAnnotations()) &&
		a.GetDeletionTimestamp().Equal(b.GetDeletionTimestamp())
}
