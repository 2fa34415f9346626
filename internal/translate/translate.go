package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
)

const (
	// DefaultControllerName is the GatewayClass controllerName snigate answers to.
	DefaultControllerName = "snigate.dev/gateway-controller"
	// DefaultBindAddress is where listeners bind when a Gateway requests no address.
	DefaultBindAddress = "0.0.0.0"
	// MaxConnectionsAnnotation caps concurrent connections per bound socket of a Gateway.
	MaxConnectionsAnnotation = "snigate.dev/max-connections-per-listener"
	// MaxListenersAnnotation caps the listeners of a Gateway that ListenerSets share: its
	// own and those of the ListenerSets it takes, counted in the sets' precedence (oldest
	// first). A set that would go beyond it is refused whole (Accepted=False/NotAllowed,
	// saying how many are left), and the sets already there keep serving: a platform team
	// bounds what its tenants together put on one shared Gateway (and its data plane).
	MaxListenersAnnotation = "snigate.dev/max-listeners"
	// PlaintextListenersAnnotation names (comma-separated) the Gateway's HTTP listeners on
	// which no application may be served in plaintext: an HTTPRoute attaches there only when
	// each of its rules redirects to https or matches only ACME HTTP-01 challenge paths
	// (/.well-known/acme-challenge/…). Allowed namespaces cannot express this: cert-manager's
	// solver routes live in the same namespace as the applications, and an application route
	// without a sectionName would otherwise attach to port 80 too (its exact hostname then
	// outranks the redirect's wildcard). TenantGateways set it on their http listener.
	PlaintextListenersAnnotation = "snigate.dev/plaintext-listeners"
	// HostnameOwnersAnnotation assigns contested hostnames of the Gateway to one route each:
	// comma-separated "hostname=namespace/Kind/name" entries. A route of another namespace
	// that claims such a hostname is Accepted=False with reason HostnameConflict, naming the
	// owner, and serves nothing; routes of the owner's namespace are unaffected. The render
	// stage writes it on TenantGateways' Gateways, where who wins is a tenant-layer decision
	// (a platform namespace over a tenant's, then the older route, then namespace/name), so
	// that translate decides each route from the route and its Gateway alone.
	HostnameOwnersAnnotation = "snigate.dev/hostname-owners"
	// ReasonHostnameConflict is the route reason of HostnameOwnersAnnotation.
	ReasonHostnameConflict gwv1.RouteConditionReason = "HostnameConflict"

	groupGateway    = gwv1.GroupName
	kindGateway     = "Gateway"
	kindListenerSet = "ListenerSet"
	kindTLSRoute    = "TLSRoute"
	kindTCPRoute    = "TCPRoute"
	kindHTTPRoute   = "HTTPRoute"
	kindService     = "Service"
	kindSecret      = "Secret"

	// ReasonNoReadyEndpoints marks a valid backend without ready endpoints in the snapshot.
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
)

// SupportedFeatures are the Gateway API features snigate implements in every mode, sorted
// by name as GatewayClass status.supportedFeatures requires. Features returns what a
// GatewayClass publishes, which depends on the mode.
var SupportedFeatures = []gwv1.SupportedFeature{
	{Name: gwv1.FeatureName(features.SupportGateway)},
	{Name: gwv1.FeatureName(features.SupportGatewayAddressEmpty)},
	{Name: gwv1.FeatureName(features.SupportGatewayHTTPListenerIsolation)},
	{Name: gwv1.FeatureName(features.SupportGatewayPort8080)},
	{Name: gwv1.FeatureName(features.SupportGatewayStaticAddresses)},
	{Name: gwv1.FeatureName(features.SupportHTTPRoute)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteBackendProtocolWebSocket)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteMethodMatching)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteParentRefPort)},
	{Name: gwv1.FeatureName(features.SupportHTTPRoutePathRedirect)},
	{Name: gwv1.FeatureName(features.SupportHTTPRoutePortRedirect)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteQueryParamMatching)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteResponseHeaderModification)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteSchemeRedirect)},
	{Name: gwv1.FeatureName(features.SupportListenerSet)},
	{Name: gwv1.FeatureName(features.SupportReferenceGrant)},
	{Name: gwv1.FeatureName(features.SupportTCPRoute)},
	{Name: gwv1.FeatureName(features.SupportTLSRoute)},
	{Name: gwv1.FeatureName(features.SupportTLSRouteModeMixed)},
	{Name: gwv1.FeatureName(features.SupportTLSRouteModeTerminate)},
}

// Features are the features a GatewayClass of snigate publishes with these options:
// SupportedFeatures, plus GatewayInfrastructure (spec.infrastructure's labels and annotations
// on the generated objects; once called GatewayInfrastructurePropagation) where
// internal/provision generates a data plane per Gateway (ProvisionedAddresses). A local proxy
// generates nothing to carry them, so it does not claim the feature.
func Features(o Options) []gwv1.SupportedFeature {
	out := slices.Clone(SupportedFeatures)
	if o.ProvisionedAddresses {
		out = append(out, gwv1.SupportedFeature{Name: gwv1.FeatureName(features.SupportGatewayInfrastructure)})
		slices.SortFunc(out, func(a, b gwv1.SupportedFeature) int { return strings.Compare(string(a.Name), string(b.Name)) })
	}
	return out
}

// Options configure a translation. The zero value is usable.
type Options struct {
	// ControllerName selects our GatewayClasses; default DefaultControllerName.
	ControllerName string
	// DefaultBindAddress is used when a Gateway has no spec.addresses IPAddress; default
	// "0.0.0.0".
	DefaultBindAddress string
	// Now stamps lastTransitionTime; tests inject a fixed time. Default metav1.Now.
	Now func() metav1.Time
	// Generation is copied into the snapshot.
	Generation uint64
	// RequireGatewayClass makes a Gateway whose GatewayClass is absent from the input not
	// ours (set it when the input is a complete view of a cluster). When false, a missing
	// class is taken as ours, so files need no GatewayClass.
	RequireGatewayClass bool
	// ProvisionedAddresses takes each Gateway's status.addresses from the LoadBalancer
	// Service provisioned for it (named ProvisionedName, controlled by the Gateway) instead
	// of the addresses its listeners bind; until the load balancer has assigned one, a
	// Gateway with programmed listeners is Programmed=False/AddressNotAssigned. Set it when
	// internal/provision runs in the cluster the input comes from, in the controller and in
	// the provisioned data planes. Its listeners then bind DefaultBindAddress (the Pod's
	// own addresses): spec.addresses are asked of the load balancer, which forwards to the
	// Pod, and are never addresses a Pod can bind.
	ProvisionedAddresses bool
	// UsableAddresses, when valid, are the only addresses a Gateway may ask for in
	// spec.addresses: those a local proxy binds (cluster.Config.LocalAddresses), or, with
	// ProvisionedAddresses, those the cluster's load balancer assigns (its pool,
	// cluster.Config.LoadBalancerAddresses). A Gateway naming one outside it is
	// Programmed=False with AddressNotUsable, and a local proxy binds only its usable ones.
	// Invalid: every address is taken as usable.
	UsableAddresses netip.Prefix
	// BindPorts binds a listener port to another port of the host (443 -> 8443): a
	// standalone gateway run without the privilege to bind ports below 1024 keeps the
	// Gateway's ports (status, routing, each port's isolation) and only listens elsewhere,
	// like a container's port mapping. Absent ports bind as they are.
	BindPorts map[int32]int32
	// Memo, when set, carries work from one call to the next (see Memo).
	Memo *Memo
}

func (o Options) withDefaults() Options {
	if o.ControllerName == "" {
		o.ControllerName = DefaultControllerName
	}
	if o.DefaultBindAddress == "" {
		o.DefaultBindAddress = DefaultBindAddress
	}
	if o.Now == nil {
		o.Now = metav1.Now
	}
	return o
}

// Result is the outcome of one translation.
type Result struct {
	// Snapshot is the routing table to serve; nil when Errors is not empty.
	Snapshot *snapshot.Snapshot
	// Status of every object translate is responsible for; nil when Errors is not empty.
	Status *Status
	// Errors is invalid input that rejects the whole configuration (see the package doc).
	// Each error is an *InputError naming file, object and field.
	Errors []error
}

// Translate turns one consistent set of objects into a snapshot and status.
func Translate(in *resources.Resources, opts Options) *Result {
	if in == nil {
		in = &resources.Resources{}
	}
	opts = opts.withDefaults()
	defaultAddr, err := netip.ParseAddr(opts.DefaultBindAddress)
	if err != nil {
		return &Result{Errors: []error{fmt.Errorf("options: DefaultBindAddress %q is not an IP address", opts.DefaultBindAddress)}}
	}
	// What the CRDs would refuse rejects the whole input (validate.go).
	errs := validate(in, opts.Memo)
	opts.Memo.endValidation(in)
	if len(errs) > 0 {
		return &Result{Errors: errs}
	}
	t := newTranslator(in, opts, defaultAddr.Unmap())
	t.gatewayClasses()   // which classes are ours (gateways.go)
	t.buildGateways()    // our Gateways and their listeners, oldest first (gateways.go)
	t.claimPorts()       // the oldest Gateway on an address and port keeps it (gateways.go)
	t.listenerPolicies() // what each bound port accepts first (policies.go)
	t.backendPolicies()  // what each Service's backends are sent first (policies.go)
	t.buildRoutes()      // routes attached to listeners, in precedence order (routes.go)
	t.accessPolicies()   // whom each listener and route admits (access.go)

	r := &Result{Snapshot: t.snapshot(), Status: t.status()} // snapshot.go, status.go
	t.saveMemo(r.Status)                                     // for the next call (memo.go)
	return r
}

type nsName struct{ ns, name string }

func (n nsName) String() string { return n.ns + "/" + n.name }

type translator struct {
	in          *resources.Resources
	opts        Options
	now         metav1.Time
	defaultAddr netip.Addr

	classes    map[string]*gwv1.GatewayClass
	classStats []GatewayClassStatus

	gateways []*gateway // ours, oldest first
	gwByName map[nsName]*gateway
	// sets are the ListenerSets whose parent is one of our Gateways, in merge precedence
	// (oldest first, then namespace/name).
	sets      []*listenerSet
	setByName map[nsName]*listenerSet

	services map[nsName]*corev1.Service
	secrets  map[nsName]*corev1.Secret
	slices   map[nsName][]*discoveryv1.EndpointSlice // by namespace and Service name
	nsLabels map[string]map[string]string
	grants   map[string][]*gwv1.ReferenceGrant // by namespace

	routeList []*route // precedence order

	// proxyOut is the PROXY header each Service's backends get, proxyIn what each bound
	// address ("ip:port") reads first (policies.go), with the policies' status.
	proxyOut            map[nsName]*snapshot.ProxyHeader
	proxyIn             map[string]*snapshot.InboundProxy
	backendPolicyStats  []BackendPolicyStatus
	listenerPolicyStats []ListenerPolicyStatus
	accessPolicyStats   []AccessPolicyStatus

	// With Options.Memo: whether its routes can be reused (memoOK), this call's context,
	// the routes taken from it, and what to remember for the next call.
	memoOK   bool
	memoCtx  memoContext
	nReused  int
	memoNext map[any]*memoRoute
	// selectors are the listeners' allowedRoutes selectors parsed, by object (memo.go).
	selectorsPrev, selectorsNext map[*metav1.LabelSelector]parsedSelector
	// fresh are this call's routes not taken from the memo, in precedence order; removed
	// are the previous call's routes that are gone (only with memoOK).
	fresh         []*route
	removed       []*memoRoute
	listenersNext map[listenerKey]*memoListener
}

func newTranslator(in *resources.Resources, opts Options, defaultAddr netip.Addr) *translator {
	t := &translator{
		in:          in,
		opts:        opts,
		now:         opts.Now(),
		defaultAddr: defaultAddr,
		classes:     map[string]*gwv1.GatewayClass{},
		gwByName:    map[nsName]*gateway{},
		setByName:   map[nsName]*listenerSet{},
		services:    map[nsName]*corev1.Service{},
		secrets:     map[nsName]*corev1.Secret{},
		slices:      map[nsName][]*discoveryv1.EndpointSlice{},
		nsLabels:    map[string]map[string]string{},
		grants:      map[string][]*gwv1.ReferenceGrant{},
		proxyOut:    map[nsName]*snapshot.ProxyHeader{},
		proxyIn:     map[string]*snapshot.InboundProxy{},
	}
	if m := opts.Memo; m != nil {
		t.memoCtx = newMemoContext(in, opts)
		t.memoOK = m.routes != nil && m.ctx.equal(t.memoCtx)
		m.call++
		if t.memoOK {
			t.memoNext = m.routes
		} else {
			t.memoNext = make(map[any]*memoRoute, len(in.TLSRoutes)+len(in.TCPRoutes)+len(in.HTTPRoutes))
		}
		t.listenersNext = map[listenerKey]*memoListener{}
		t.selectorsPrev, t.selectorsNext = m.selectors, map[*metav1.LabelSelector]parsedSelector{}
	}
	for _, c := range in.GatewayClasses {
		t.classes[c.Name] = c
	}
	for _, s := range in.Services {
		t.services[nsName{s.Namespace, s.Name}] = s
	}
	for _, s := range in.Secrets {
		t.secrets[nsName{s.Namespace, s.Name}] = s
	}
	for _, es := range in.EndpointSlices {
		if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" {
			k := nsName{es.Namespace, svc}
			t.slices[k] = append(t.slices[k], es)
		}
	}
	for _, k := range sortedKeys(t.slices) {
		slices.SortFunc(t.slices[k], func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	}
	for _, n := range in.Namespaces {
		t.nsLabels[n.Name] = n.Labels
	}
	for _, g := range in.ReferenceGrants {
		t.grants[g.Namespace] = append(t.grants[g.Namespace], g)
	}
	return t
}

func sortedKeys[V any](m map[nsName]V) []nsName {
	keys := make([]nsName, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b nsName) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name)) })
	return keys
}

// olderFirst orders objects the way the Gateway API breaks ties: oldest creationTimestamp,
// then namespace/name alphabetically.
func olderFirst(a, b *metav1.ObjectMeta) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// namespaceLabels returns the labels a Namespace has, including the label the API server
// puts on every namespace.
func (t *translator) namespaceLabels(ns string) labels.Set {
	set := labels.Set{corev1.LabelMetadataName: ns}
	for k, v := range t.nsLabels[ns] {
		set[k] = v
	}
	set[corev1.LabelMetadataName] = ns
	return set
}

// granted reports whether a ReferenceGrant in the target namespace allows a reference from
// (fromKind in fromNS, group gateway.networking.k8s.io) to the object toKind/toNS/toName of
// the core group.
func (t *translator) granted(fromKind, fromNS, toKind, toNS, toName string) bool {
	return Granted(t.grants[toNS], fromKind, fromNS, toKind, toNS, toName)
}

// Granted reports whether one of grants (ReferenceGrants; those of other namespaces than
// toNS are ignored) allows a reference from fromKind of group gateway.networking.k8s.io in
// fromNS to the core-group object toKind toNS/toName. The render stage asks it too, so that
// a TenantGateway's status says RefNotPermitted exactly when translate refuses the ref.
func Granted(grants []*gwv1.ReferenceGrant, fromKind, fromNS, toKind, toNS, toName string) bool {
	for _, g := range grants {
		if g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return string(f.Group) == groupGateway && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		if !from {
			continue
		}
		to := slices.ContainsFunc(g.Spec.To, func(to gwv1.ReferenceGrantTo) bool {
			return to.Group == "" && string(to.Kind) == toKind && (to.Name == nil || *to.Name == "" || string(*to.Name) == toName)
		})
		if to {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
