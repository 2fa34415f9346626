package render

import (
	"slices"
	"strings"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
)

// index is what the renderer looks up by namespace and name, or by namespace, built once
// per Render. Every TenantGateway and every DatabaseExposure looks objects up (a name in
// use, its tree's routes, its TrustAnchor, the shared Gateway): scanned from the whole
// input each time, 1 000 tenants with 10 000 exposures made one render take seconds, and a
// cluster renders on every change.
type index struct {
	gateways     *table[*gwv1.Gateway]
	listenerSets *table[*gwv1.ListenerSet]
	httpRoutes   *table[*gwv1.HTTPRoute]
	tlsRoutes    *table[*gwv1.TLSRoute]
	tcpRoutes    *table[*gwv1.TCPRoute]
	secrets      *table[*corev1.Secret]
	anchors      *table[*v1alpha1.TrustAnchor]
	issuers      *table[*cmv1.Issuer]
	certificates *table[*cmv1.Certificate]
	namespaces   map[string]*corev1.Namespace
	// services are looked up for spec.members (a member whose Service is missing says so);
	// exposures, for a member route's name that an exposure of that name holds.
	services  *table[*corev1.Service]
	exposures *table[*v1alpha1.DatabaseExposure]

	// The namespaces labelled snigate.dev/gateway=<key>, in input order.
	labelled map[string][]*corev1.Namespace
	// The ListenerSets of the input on each Gateway (namespace/name), in input order.
	setsOn map[nsName][]*gwv1.ListenerSet
}

type nsName struct{ namespace, name string }

func keyOf[T interface {
	GetNamespace() string
	GetName() string
}](o T) nsName {
	return nsName{o.GetNamespace(), o.GetName()}
}

// byName maps objs by namespace and name; the first of a name wins, as a scan would find.
func byName[T interface {
	GetNamespace() string
	GetName() string
}](objs []T) map[nsName]T {
	m := make(map[nsName]T, len(objs))
	for _, o := range objs {
		if _, dup := m[keyOf(o)]; !dup {
			m[keyOf(o)] = o
		}
	}
	return m
}

func newIndex(in *resources.Resources, opts Options) *index {
	x := &index{
		gateways:     newTable(in.Gateways),
		listenerSets: newTable(in.ListenerSets),
		httpRoutes:   newTable(in.HTTPRoutes),
		tlsRoutes:    newTable(in.TLSRoutes),
		tcpRoutes:    newTable(in.TCPRoutes),
		secrets:      newTable(in.Secrets),
		anchors:      newTable(in.TrustAnchors),
		issuers:      newTable(opts.Issuers),
		certificates: newTable(opts.Certificates),
		namespaces:   make(map[string]*corev1.Namespace, len(in.Namespaces)),
		services:     newTable(in.Services),
		exposures:    newTable(in.DatabaseExposures),
		labelled:     map[string][]*corev1.Namespace{},
		setsOn:       map[nsName][]*gwv1.ListenerSet{},
	}
	for _, ns := range in.Namespaces {
		x.namespaces[ns.Name] = ns
		if g := ns.Labels[LabelGateway]; g != "" {
			x.labelled[g] = append(x.labelled[g], ns)
		}
	}
	for _, ls := range in.ListenerSets {
		x.setsOn[parentOf(ls)] = append(x.setsOn[parentOf(ls)], ls)
	}
	return x
}

// table finds a kind's objects by namespace and name, and by namespace. A list in
// namespace/name order, as the cluster source lists every kind, is searched where it lies;
// another (files) is indexed by maps the first time it is asked. Why: built as maps on
// every render, the index of 10 000 routes and exposures was a tenth of a change's render
// in a cluster, where a change asks for a handful of them.
type table[T interface {
	comparable
	GetNamespace() string
	GetName() string
}] struct {
	objs   []T
	sorted bool
	byName map[nsName]T
	byNS   map[string][]T
}

func newTable[T interface {
	comparable
	GetNamespace() string
	GetName() string
}](objs []T) *table[T] {
	return &table[T]{objs: objs, sorted: resources.Sorted(objs)}
}

// get is the object named k (the first of that name, as a scan would find), or the zero T.
func (t *table[T]) get(k nsName) T {
	if t.sorted {
		i, ok := slices.BinarySearchFunc(t.objs, k, func(o T, k nsName) int {
			return resources.CompareNames(o.GetNamespace(), o.GetName(), k.namespace, k.name)
		})
		if ok {
			return t.objs[i]
		}
		var none T
		return none
	}
	if t.byName == nil {
		t.byName = byName(t.objs)
	}
	return t.byName[k]
}

// in is the objects of namespace ns, in input order; nil when none. The result is not to
// be appended to.
func (t *table[T]) in(ns string) []T {
	if t.sorted {
		i, _ := slices.BinarySearchFunc(t.objs, ns, func(o T, ns string) int { return strings.Compare(o.GetNamespace(), ns) })
		j := i
		for j < len(t.objs) && t.objs[j].GetNamespace() == ns {
			j++
		}
		if i == j {
			return nil
		}
		return t.objs[i:j:j]
	}
	if t.byNS == nil {
		t.byNS = map[string][]T{}
		for _, o := range t.objs {
			t.byNS[o.GetNamespace()] = append(t.byNS[o.GetNamespace()], o)
		}
	}
	return t.byNS[ns]
}

// parentOf is the Gateway a ListenerSet names (its parentRef's namespace defaults to its
// own); translate.IsParent also checks the parentRef's group and kind.
func parentOf(ls *gwv1.ListenerSet) nsName {
	ref := ls.Spec.ParentRef
	ns := ls.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return nsName{ns, string(ref.Name)}
}
