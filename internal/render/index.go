package render

import (
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

// table is a resources.Table asked with render's keys.
type table[T interface {
	comparable
	GetNamespace() string
	GetName() string
}] struct{ t *resources.Table[T] }

func newTable[T interface {
	comparable
	GetNamespace() string
	GetName() string
}](objs []T) *table[T] {
	return &table[T]{resources.NewTable(objs)}
}

// get is the object named k, or the zero T.
func (t *table[T]) get(k nsName) T { return t.t.Get(k.namespace, k.name) }

// in is the objects of namespace ns, in input order; nil when none (not to be appended to).
func (t *table[T]) in(ns string) []T { return t.t.In(ns) }

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
