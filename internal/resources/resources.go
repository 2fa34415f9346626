// Package resources holds the set of Kubernetes and Gateway API objects that snigate reads,
// whatever their source (YAML files or a Kubernetes API server). It is the input of the
// translate stage.
//
//	for _, k := range resources.Kinds { ... } // every kind snigate reads, and how
//	res := &resources.Resources{}
//	resources.KindOf("gateway.networking.k8s.io", "Gateway").Add(res, gw)
//
// # The contract between the stages
//
// Kinds is the one list of the kinds snigate reads: the file loader, the cluster source,
// translate's memo and the golden tests all range over it, so adding a kind is one entry
// there and one field in Resources.
//
// Objects are immutable once in a Resources: a source that sees an object change puts a new
// pointer in the next Resources, and nothing downstream (translate, the runner, the status
// writer) modifies an object it was given. Incremental work relies on it: the file loader
// hands out the same pointers for documents that did not change, and translate's memo
// remembers routes by pointer, so a change of one route among 100 000 hostnames translates
// that route alone (docs/performance.md).
package resources

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Resources is one consistent view of every object snigate routes from. Sources fill it;
// translate only reads it.
type Resources struct {
	GatewayClasses []*gwv1.GatewayClass
	Gateways       []*gwv1.Gateway
	// ListenerSets add listeners to a Gateway that allows them (spec.allowedListeners).
	ListenerSets    []*gwv1.ListenerSet
	TLSRoutes       []*gwv1.TLSRoute
	TCPRoutes       []*gwv1.TCPRoute
	HTTPRoutes      []*gwv1.HTTPRoute
	ReferenceGrants []*gwv1.ReferenceGrant
	Services        []*corev1.Service
	EndpointSlices  []*discoveryv1.EndpointSlice
	Secrets         []*corev1.Secret
	Namespaces      []*corev1.Namespace
	// TenantGateways are rendered into Gateway API objects by package render.
	TenantGateways []*v1alpha1.TenantGateway
	// DatabaseExposures are rendered into TLSRoutes (and TCPRoutes) on their TenantGateway.
	DatabaseExposures []*v1alpha1.DatabaseExposure
	// TrustAnchors are rendered into key-free CA Secrets a tenant may read.
	TrustAnchors []*v1alpha1.TrustAnchor
	// BackendPolicies set how snigate connects to a Service's backends (the PROXY header).
	BackendPolicies []*v1alpha1.BackendPolicy
	// ListenerPolicies set how a Gateway's listeners accept connections (PROXY headers from
	// trusted load balancers).
	ListenerPolicies []*v1alpha1.ListenerPolicy
	// AccessPolicies say which clients may connect to a Gateway's listeners, a ListenerSet
	// or a route, and how much.
	AccessPolicies []*v1alpha1.AccessPolicy

	// Origins maps "Kind/namespace/name" to where the object came from ("dir/file.yaml#2"),
	// so errors can name the file. Empty for objects read from an API server.
	Origins map[string]string
}

// OriginKey is the key of Origins for an object: "Kind/namespace/name", with an empty
// namespace for cluster-scoped kinds ("GatewayClass//snigate").
func OriginKey(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// Origin returns where an object came from ("dir/file.yaml#2"), or "" when unknown.
func (r *Resources) Origin(kind, namespace, name string) string {
	if r == nil {
		return ""
	}
	return r.Origins[OriginKey(kind, namespace, name)]
}

// DescribeOrigin turns an Origins value ("dir/file.yaml#2", "dir/file.yaml#2/items[0]") into
// the prefix errors use: "dir/file.yaml: document 2" ("dir/file.yaml: document 2, items[0]").
func DescribeOrigin(origin string) string {
	i := strings.LastIndexByte(origin, '#')
	if i < 0 {
		return origin
	}
	file, doc := origin[:i], origin[i+1:]
	doc, item, _ := strings.Cut(doc, "/")
	s := file + ": document " + doc
	if item != "" {
		s += ", " + item
	}
	return s
}
