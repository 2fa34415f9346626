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
	gateways     map[nsName]*gwv1.Gateway
	listenerSets map[nsName]*gwv1.ListenerSet
	httpRoutes   map[nsName]*gwv1.HTTPRoute
	tlsRoutes    map[nsName]*gwv1.TLSRoute
	tcpRoutes    map[nsName]*gwv1.TCPRoute
	secrets      map[nsName]*corev1.Secret
	anchors      map[nsName]*v1alpha1.TrustAnchor
	issuers      map[nsName]*cmv1.Issuer
	certificates map[nsName]*cmv1.Certificate
	namespaces   map[string]*corev1.Namespace
	// services are looked up for spec.members (a member whose Service is missing says so);
	// exposures, for a member route's name that an exposure of that name holds.
	services  map[nsName]*corev1.Service
	exposures map[nsName]*v1alpha1.DatabaseExposure

	// The routes of each namespace, in input order.
	httpIn map[string][]*gwv1.HTTPRoute
	tlsIn  map[string][]*gwv1.TLSRoute
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
		gateways:     byName(in.Gateways),
		listenerSets: byName(in.ListenerSets),
		httpRoutes:   byName(in.HTTPRoutes),
		tlsRoutes:    byName(in.TLSRoutes),
		tcpRoutes:    byName(in.TCPRoutes),
		secrets:      byName(in.Secrets),
		anchors:      byName(in.TrustAnchors),
		issuers:      byName(opts.Issuers),
		certificates: byName(opts.Certificates),
		namespaces:   make(map[string]*corev1.Namespace, len(in.Namespaces)),
		services:     byName(in.Services),
		exposures:    byName(in.DatabaseExposures),
		httpIn:       map[string][]*gwv1.HTTPRoute{},
		tlsIn:        map[string][]*gwv1.TLSRoute{},
		labelled:     map[string][]*corev1.Namespace{},
		setsOn:       map[nsName][]*gwv1.ListenerSet{},
	}
	for _, ns := range in.Namespaces {
		x.namespaces[ns.Name] = ns
		if g := ns.Labels[LabelGateway]; g != "" {
			x.labelled[g] = append(x.labelled[g], ns)
		}
	}
	for _, h := range in.HTTPRoutes {
		x.httpIn[h.Namespace] = append(x.httpIn[h.Namespace], h)
	}
	for _, t := range in.TLSRoutes {
		x.tlsIn[t.Namespace] = append(x.tlsIn[t.Namespace], t)
	}
	for _, ls := range in.ListenerSets {
		x.setsOn[parentOf(ls)] = append(x.setsOn[parentOf(ls)], ls)
	}
	return x
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
