package render

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
)

// Merge returns res with the rendered objects in it (a new Resources; res is not changed,
// its objects are shared). Origins name each rendered object's TenantGateway or
// DatabaseExposure, so translate's errors point at the file a user wrote.
//
// A cluster holds the objects a controller applied from earlier renders: an object of res
// that a TenantGateway or DatabaseExposure controls (its controller ownerRef) gives way to
// the rendered one of the same kind and name, and is left out when its owner was rendered
// anew without it or exists no more (an exposure deleted before the garbage collector
// removed its route). An owner that kept its previous objects (bad input) keeps those of
// res too: after a restart they are what serves.
func (r *Result) Merge(res *resources.Resources) *resources.Resources {
	out := *res
	owners := &owners{r: r}
	out.Gateways = mergeKind(res.Gateways, r.Gateways, owners)
	out.ListenerSets = mergeKind(res.ListenerSets, r.ListenerSets, owners)
	out.HTTPRoutes = mergeKind(res.HTTPRoutes, r.HTTPRoutes, owners)
	out.TLSRoutes = mergeKind(res.TLSRoutes, r.TLSRoutes, owners)
	out.TCPRoutes = mergeKind(res.TCPRoutes, r.TCPRoutes, owners)
	out.AccessPolicies = mergeKind(res.AccessPolicies, r.AccessPolicies, owners)
	if len(r.Secrets) > 0 {
		kept := map[[2]string]*corev1.Secret{}
		for _, s := range r.Secrets {
			kept[[2]string{s.Namespace, s.Name}] = s
		}
		out.Secrets = make([]*corev1.Secret, 0, len(res.Secrets)+len(kept))
		for _, s := range res.Secrets {
			k := [2]string{s.Namespace, s.Name}
			if ks, ok := kept[k]; ok {
				out.Secrets = append(out.Secrets, ks)
				delete(kept, k)
			} else {
				out.Secrets = append(out.Secrets, s)
			}
		}
		for _, s := range r.Secrets {
			if _, ok := kept[[2]string{s.Namespace, s.Name}]; ok {
				out.Secrets = append(out.Secrets, s)
			}
		}
	}
	// A rendered object's origin is its owner's, and an object without one has none (""):
	// read from an API server, nothing has an origin, and 11 000 map entries of "" a change
	// were a tenth of Merge's time at 10 000 exposures.
	if len(res.Origins) > 0 {
		out.Origins = maps.Clone(res.Origins)
		set := func(kind, namespace, name, origin string) {
			if origin == "" {
				delete(out.Origins, resources.OriginKey(kind, namespace, name))
			} else {
				out.Origins[resources.OriginKey(kind, namespace, name)] = origin
			}
		}
		for _, g := range r.Gateways {
			set("Gateway", g.Namespace, g.Name, res.Origin("TenantGateway", g.Namespace, g.Labels[LabelTenantGateway]))
		}
		for _, ls := range r.ListenerSets {
			set("ListenerSet", ls.Namespace, ls.Name, res.Origin("TenantGateway", ls.Namespace, ls.Labels[LabelTenantGateway]))
		}
		for _, h := range r.HTTPRoutes {
			set("HTTPRoute", h.Namespace, h.Name, res.Origin("TenantGateway", h.Namespace, h.Labels[LabelTenantGateway]))
		}
		for _, tr := range r.TLSRoutes {
			set("TLSRoute", tr.Namespace, tr.Name, res.Origin("DatabaseExposure", tr.Namespace, tr.Labels[LabelDatabaseExposure]))
		}
		for _, tr := range r.TCPRoutes {
			set("TCPRoute", tr.Namespace, tr.Name, res.Origin("DatabaseExposure", tr.Namespace, tr.Labels[LabelDatabaseExposure]))
		}
		for _, ap := range r.AccessPolicies {
			origin := res.Origin("TenantGateway", ap.Namespace, ap.Labels[LabelTenantGateway])
			if exposurePolicy(ap) {
				origin = res.Origin("DatabaseExposure", ap.Namespace, ap.Labels[LabelDatabaseExposure])
			}
			set("AccessPolicy", ap.Namespace, ap.Name, origin)
		}
	}
	return &out
}

// ownerState is what a render says of a TenantGateway or DatabaseExposure: rendered anew
// (its objects are exactly the render's), or kept (its previous objects stay).
type ownerState int

const (
	ownerKept ownerState = iota + 1
	ownerFresh
)

// owners are the TenantGateways and DatabaseExposures of r by kind, namespace and name,
// indexed the first time an object of the input needs its owner's state: in a cluster,
// only when an owner went or dropped an object, not on every change.
type owners struct {
	r     *Result
	state map[[3]string]ownerState
}

func (o *owners) of(kind, namespace, name string) ownerState {
	if o.state == nil {
		r := o.r
		o.state = make(map[[3]string]ownerState, len(r.Tenants)+len(r.Exposures))
		state := func(fresh bool) ownerState {
			if fresh {
				return ownerFresh
			}
			return ownerKept
		}
		for _, t := range r.Tenants {
			o.state[[3]string{"TenantGateway", t.Namespace, t.Name}] = state(t.Rendered)
		}
		for _, x := range r.Exposures {
			o.state[[3]string{"DatabaseExposure", x.Namespace, x.Name}] = state(x.Rendered)
		}
	}
	return o.state[[3]string{kind, namespace, name}]
}

// mergeKind is in's objects, less those rendered ones replace or whose owner dropped them,
// then rendered (Merge). A rendered object the input holds already, as the controller
// applied it (sameRendered), is the input's copy instead.
func mergeKind[T interface {
	*E
	metav1.Object
}, E any](in, rendered []T, owners *owners) []T {
	if len(rendered) == 0 && len(in) == 0 {
		return in
	}
	match := matching(in, rendered)
	out := make([]T, 0, len(in)+len(rendered))
	applied := make([]T, len(rendered)) // by rendered index: the input's copy to use
	for i, o := range in {
		if j := match[i]; j >= 0 {
			if sameRendered(o, rendered[j]) {
				applied[j] = o
			}
			continue
		}
		if ref := metav1.GetControllerOf(o); ref != nil && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupName+"/") &&
			(ref.Kind == "TenantGateway" || ref.Kind == "DatabaseExposure") {
			if owners.of(ref.Kind, o.GetNamespace(), ref.Name) != ownerKept {
				continue // rendered anew without it, or gone
			}
		}
		out = append(out, o)
	}
	for j, r := range rendered {
		if a := applied[j]; a != nil {
			r = a
		}
		out = append(out, r)
	}
	return out
}

// matching is, for each object of in, the index of the rendered object of the same
// namespace and name, or -1. Both in namespace/name order (a cluster lists in, and render
// visits tenants and their exposures, in that order), one walk matches them; otherwise (files,
// a tenant with attached namespaces) a map does. At 10 000 routes the map was half of Merge.
func matching[T interface {
	*E
	metav1.Object
}, E any](in, rendered []T) []int {
	match := make([]int, len(in))
	if resources.Sorted(in) && resources.Sorted(rendered) {
		j := 0
		for i, o := range in {
			for j < len(rendered) && resources.Compare(rendered[j], o) < 0 {
				j++
			}
			match[i] = -1
			if j < len(rendered) && resources.Compare(rendered[j], o) == 0 {
				match[i] = j
			}
		}
		return match
	}
	byKey := make(map[nsName]int, len(rendered))
	for j, o := range rendered {
		byKey[keyOf(o)] = j
	}
	for i, o := range in {
		match[i] = -1
		if j, ok := byKey[keyOf(o)]; ok {
			match[i] = j
		}
	}
	return match
}

// SameObjects reports whether r rendered the very same objects as o (the same pointers:
// Render hands back Previous's objects for everything rendered as before), so that what
// translate and the data plane see of r is what they saw of o: only status differs.
func (r *Result) SameObjects(o *Result) bool {
	return slices.Equal(r.Gateways, o.Gateways) && slices.Equal(r.ListenerSets, o.ListenerSets) &&
		slices.Equal(r.HTTPRoutes, o.HTTPRoutes) && slices.Equal(r.TLSRoutes, o.TLSRoutes) &&
		slices.Equal(r.TCPRoutes, o.TCPRoutes) && slices.Equal(r.AccessPolicies, o.AccessPolicies) &&
		slices.Equal(r.Secrets, o.Secrets)
}
