// Package translate is snigate's pure translate stage: Gateway API and core objects in,
// an immutable routing snapshot and the Gateway API status of every object out.
//
//	res, _ := file.Load("examples/quickstart")
//	r := translate.Translate(res, translate.Options{})
//	if len(r.Errors) > 0 { /* input rejected as a whole: keep the previous snapshot */ }
//	proxy.Swap(r.Snapshot); statusWriter.Write(r.Status)
//
// Translate does no I/O, starts no goroutines and reads no clock except Options.Now; the same
// input always gives the same output, which the golden tests in testdata/ pin down.
//
// # Two kinds of problems
//
// Input that the Gateway API CRDs' OpenAPI/CEL validation (or the API server) would refuse to
// store — an invalid hostname, a port out of range, a TLSRoute with two rules, duplicate
// listener names, a missing required field — can never exist in a cluster. From files it
// rejects the whole configuration: Result.Errors names file, object and field, and
// Result.Snapshot is nil so the caller keeps serving what it served before.
//
// Everything else is reported the way a Gateway API controller reports it, in status
// conditions, and the rest of the configuration is served: a missing backend, a Secret that
// does not parse, a route that no listener allows.
//
// # Decisions where the specification leaves room
//
//   - GatewayClass: a Gateway is ours when its GatewayClass has our controllerName. When the
//     input holds no GatewayClass of that name at all, the class is taken as ours (standalone
//     file mode needs no GatewayClass), unless Options.RequireGatewayClass is set (Kubernetes).
//   - Addresses: every spec.addresses entry of type IPAddress is bound (an empty value means
//     Options.DefaultBindAddress); without any, DefaultBindAddress. Other address types make
//     the Gateway Accepted=False/UnsupportedAddress.
//   - Several Gateways on one port: a socket cannot serve two Gateways, so Gateways are not
//     merged. The oldest Gateway (creationTimestamp, then namespace/name) keeps the port; a
//     listener of a younger Gateway whose address and port overlap (0.0.0.0 and :: overlap
//     every address of their family) gets Accepted=False/PortUnavailable.
//   - Listener conflicts: a TCP listener sharing its port with any other listener, an HTTP
//     listener sharing its port with a TLS or HTTPS listener (ProtocolConflict), and TLS or
//     HTTPS listeners sharing port and hostname (HostnameConflict) are Conflicted=True and
//     Accepted=False with the conflict's reason, as the TLSRoute conformance tests expect;
//     none of them is served. Listeners of protocols snigate does not serve (UDP, custom:
//     Accepted=False/UnsupportedProtocol) take part in no conflict. Passthrough, Terminate
//     and HTTPS listeners on one port with distinct hostnames are fine (TLSRouteModeMixed):
//     the port reads the ClientHello once and dispatches by SNI.
//   - HTTPRoute: precedence and status as the API defines them (see httproute.go). A route
//     using a feature snigate does not implement (URLRewrite, RequestMirror, CORS,
//     ExtensionRef and ExternalAuth filters, RegularExpression matches, backendRef filters,
//     timeouts, retries, session persistence) is Accepted=False/UnsupportedValue rather than
//     served without it. A more specific hostname takes a request whole: only the matches
//     of routes serving that exact hostname pattern are tried.
//   - A listener is Programmed (and in the snapshot) when its Gateway and itself are
//     accepted, all its certificateRefs resolve, and it allows at least one route kind. A
//     Terminate listener with one bad certificateRef serves nothing: it fails closed.
//   - Routes attach per the spec: a route counts in attachedRoutes, and is Accepted=True, when
//     its parentRef selects the listener, the listener's allowedRoutes admit it and (TLSRoute)
//     a hostname intersects — whatever the listener's own status. It is Accepted=True even
//     where older routes claimed all its hostnames (GEP-2644: "all attached routes are
//     Accepted"); the snapshot serves each hostname from the oldest route only.
//   - Namespaces for allowedRoutes selectors carry the label kubernetes.io/metadata.name=<name>
//     as every real namespace does, also when the input has no Namespace object.
//   - Backends: a valid Service backend without ready endpoints keeps ResolvedRefs=True and is
//     marked NoReadyEndpoints in the snapshot only. ExternalName Services are not followed
//     (InvalidKind). A backendRef to a Service port that does not exist is BackendNotFound.
//   - Annotation snigate.dev/max-connections-per-listener: "N" on a Gateway caps concurrent
//     connections on each socket the Gateway binds (snapshot.Port.MaxConnections); a value
//     that is not a non-negative integer makes the Gateway Accepted=False/Invalid.
package translate

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
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

	groupGateway  = gwv1.GroupName
	kindGateway   = "Gateway"
	kindTLSRoute  = "TLSRoute"
	kindTCPRoute  = "TCPRoute"
	kindHTTPRoute = "HTTPRoute"
	kindService   = "Service"
	kindSecret    = "Secret"

	// ReasonNoReadyEndpoints marks a valid backend without ready endpoints in the snapshot.
	ReasonNoReadyEndpoints = "NoReadyEndpoints"
)

// SupportedFeatures are the Gateway API features snigate implements, sorted by name as
// GatewayClass status.supportedFeatures requires.
var SupportedFeatures = []gwv1.SupportedFeature{
	{Name: gwv1.FeatureName(features.SupportGateway)},
	{Name: gwv1.FeatureName(features.SupportHTTPRoute)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteBackendProtocolWebSocket)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteMethodMatching)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteParentRefPort)},
	{Name: gwv1.FeatureName(features.SupportHTTPRoutePathRedirect)},
	{Name: gwv1.FeatureName(features.SupportHTTPRoutePortRedirect)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteQueryParamMatching)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteResponseHeaderModification)},
	{Name: gwv1.FeatureName(features.SupportHTTPRouteSchemeRedirect)},
	{Name: gwv1.FeatureName(features.SupportReferenceGrant)},
	{Name: gwv1.FeatureName(features.SupportTCPRoute)},
	{Name: gwv1.FeatureName(features.SupportTLSRoute)},
	{Name: gwv1.FeatureName(features.SupportTLSRouteModeMixed)},
	{Name: gwv1.FeatureName(features.SupportTLSRouteModeTerminate)},
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
	errs := validate(in, opts.Memo)
	opts.Memo.endValidation(in)
	if len(errs) > 0 {
		return &Result{Errors: errs}
	}
	t := newTranslator(in, opts, defaultAddr.Unmap())
	t.gatewayClasses()
	t.buildGateways()
	t.claimPorts()
	t.buildRoutes()
	r := &Result{Snapshot: t.snapshot(), Status: t.status()}
	t.saveMemo(r.Status)
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

	services map[nsName]*corev1.Service
	secrets  map[nsName]*corev1.Secret
	slices   map[nsName][]*discoveryv1.EndpointSlice // by namespace and Service name
	nsLabels map[string]map[string]string
	grants   map[string][]*gwv1.ReferenceGrant // by namespace

	routeList []*route // precedence order

	// With Options.Memo: whether its routes can be reused (memoOK), this call's context,
	// the routes taken from it, and what to remember for the next call.
	memoOK   bool
	memoCtx  memoContext
	nReused  int
	memoNext map[any]*memoRoute
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
		services:    map[nsName]*corev1.Service{},
		secrets:     map[nsName]*corev1.Secret{},
		slices:      map[nsName][]*discoveryv1.EndpointSlice{},
		nsLabels:    map[string]map[string]string{},
		grants:      map[string][]*gwv1.ReferenceGrant{},
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
	for _, g := range t.grants[toNS] {
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

// ---- GatewayClasses ----

func (t *translator) gatewayClasses() {
	names := make([]string, 0, len(t.classes))
	for n := range t.classes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c := t.classes[n]
		if string(c.Spec.ControllerName) != t.opts.ControllerName {
			continue
		}
		conds := conditions{gen: c.Generation, now: t.now}
		conds.set(string(gwv1.GatewayClassConditionStatusAccepted), true, string(gwv1.GatewayClassReasonAccepted),
			"GatewayClass is accepted by "+t.opts.ControllerName)
		t.classStats = append(t.classStats, GatewayClassStatus{
			Name: c.Name,
			Status: gwv1.GatewayClassStatus{
				Conditions:        conds.list,
				SupportedFeatures: slices.Clone(SupportedFeatures),
			},
		})
	}
}

// ours reports whether a Gateway of the given class is ours to serve.
func (t *translator) ours(class string) bool {
	c, ok := t.classes[class]
	if !ok {
		return !t.opts.RequireGatewayClass
	}
	return string(c.Spec.ControllerName) == t.opts.ControllerName
}

// ---- Gateways and listeners ----

type gateway struct {
	obj       *gwv1.Gateway
	key       nsName
	addrs     []netip.Addr
	maxConns  int
	listeners []*listener

	// rejectReason is set when the Gateway as a whole is not accepted, before its
	// listeners are looked at.
	rejectReason gwv1.GatewayConditionReason
	rejectMsg    string
}

func (gw *gateway) rejected() bool { return gw.rejectReason != "" }

type listener struct {
	gw       *gateway
	index    int // in gw.listeners
	spec     *gwv1.Listener
	hostname string // "" = any
	// routeKind is the one route kind the protocol carries; "" for protocols we do not serve.
	routeKind      string
	supportedKinds []gwv1.RouteGroupKind
	kindsMsg       string // why some requested kinds are invalid
	from           gwv1.FromNamespaces
	selector       labels.Selector
	mode           snapshot.Mode

	// Accepted=False with this reason when set (unsupported protocol, conflict, port).
	rejectReason gwv1.ListenerConditionReason
	rejectMsg    string
	conflict     gwv1.ListenerConditionReason
	conflictMsg  string
	// certificate problems: ResolvedRefs=False with this reason.
	refsReason gwv1.ListenerConditionReason
	refsMsg    string
	tlsConfig  *tls.Config

	attached []*attachment // in route precedence order
	snap     *snapshot.Listener
}

type attachment struct {
	route     *route
	hostnames []string // effective hostnames on this listener (TLSRoute)
}

func (l *listener) accepted() bool { return l.rejectReason == "" }

func (l *listener) programmed() bool {
	return !l.gw.rejected() && l.accepted() && l.refsReason == "" && len(l.supportedKinds) > 0
}

func (l *listener) name() string {
	return l.gw.key.ns + "/" + l.gw.key.name + "/" + string(l.spec.Name)
}

func (t *translator) buildGateways() {
	gws := slices.Clone(t.in.Gateways)
	slices.SortFunc(gws, func(a, b *gwv1.Gateway) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	for _, g := range gws {
		if !t.ours(string(g.Spec.GatewayClassName)) {
			continue
		}
		gw := t.gateway(g)
		t.gateways = append(t.gateways, gw)
		t.gwByName[gw.key] = gw
	}
}

func (t *translator) gateway(g *gwv1.Gateway) *gateway {
	gw := &gateway{obj: g, key: nsName{g.Namespace, g.Name}}
	reject := func(reason gwv1.GatewayConditionReason, msg string) {
		if !gw.rejected() {
			gw.rejectReason, gw.rejectMsg = reason, msg
		}
	}
	if inf := g.Spec.Infrastructure; inf != nil && inf.ParametersRef != nil {
		reject(gwv1.GatewayReasonInvalidParameters,
			fmt.Sprintf("spec.infrastructure.parametersRef: snigate takes no parameters (%s %s)", inf.ParametersRef.Kind, inf.ParametersRef.Name))
	}
	for i, a := range g.Spec.Addresses {
		if a.Type != nil && *a.Type != gwv1.IPAddressType {
			reject(gwv1.GatewayReasonUnsupportedAddress,
				fmt.Sprintf("spec.addresses[%d]: address type %s is not supported, only IPAddress", i, *a.Type))
			continue
		}
		addr := t.defaultAddr
		if a.Value != "" {
			addr = netip.MustParseAddr(a.Value).Unmap() // validated
		}
		if !slices.Contains(gw.addrs, addr) {
			gw.addrs = append(gw.addrs, addr)
		}
	}
	if len(gw.addrs) == 0 {
		gw.addrs = []netip.Addr{t.defaultAddr}
	}
	if v, ok := g.Annotations[MaxConnectionsAnnotation]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			reject(gwv1.GatewayReasonInvalid,
				fmt.Sprintf("metadata.annotations[%s]: %q is not a non-negative integer", MaxConnectionsAnnotation, v))
		}
		gw.maxConns = n
	}
	for i := range g.Spec.Listeners {
		l := t.listener(gw, &g.Spec.Listeners[i])
		l.index = i
		gw.listeners = append(gw.listeners, l)
	}
	markConflicts(gw)
	return gw
}

func (t *translator) listener(gw *gateway, spec *gwv1.Listener) *listener {
	l := &listener{gw: gw, spec: spec, supportedKinds: []gwv1.RouteGroupKind{}}
	if spec.Hostname != nil {
		l.hostname = strings.ToLower(string(*spec.Hostname))
	}
	switch spec.Protocol {
	case gwv1.TLSProtocolType:
		l.routeKind = kindTLSRoute
		l.mode = snapshot.ModeTerminate
		if spec.TLS != nil && spec.TLS.Mode != nil && *spec.TLS.Mode == gwv1.TLSModePassthrough {
			l.mode = snapshot.ModePassthrough
		}
	case gwv1.TCPProtocolType:
		l.routeKind = kindTCPRoute
	case gwv1.HTTPProtocolType:
		l.routeKind = kindHTTPRoute
	case gwv1.HTTPSProtocolType:
		l.routeKind = kindHTTPRoute
		l.mode = snapshot.ModeTerminate // validated: HTTPS allows only Terminate
	default:
		l.rejectReason = gwv1.ListenerReasonUnsupportedProtocol
		l.rejectMsg = fmt.Sprintf("protocol %s is not supported: snigate serves HTTP, HTTPS, TLS and TCP listeners", spec.Protocol)
		return l
	}

	// allowedRoutes.kinds
	var invalid []string
	if ar := spec.AllowedRoutes; ar != nil && len(ar.Kinds) > 0 {
		for _, k := range ar.Kinds {
			group := groupGateway
			if k.Group != nil {
				group = string(*k.Group)
			}
			if group == groupGateway && string(k.Kind) == l.routeKind {
				if len(l.supportedKinds) == 0 {
					l.supportedKinds = append(l.supportedKinds, routeGroupKind(l.routeKind))
				}
				continue
			}
			invalid = append(invalid, groupKind(group, string(k.Kind)))
		}
	} else {
		l.supportedKinds = append(l.supportedKinds, routeGroupKind(l.routeKind))
	}
	if len(invalid) > 0 {
		l.kindsMsg = fmt.Sprintf("route kinds %s are not supported on a %s listener, only %s", strings.Join(invalid, ", "), spec.Protocol, l.routeKind)
	}

	// allowedRoutes.namespaces
	l.from = gwv1.NamespacesFromSame
	if ar := spec.AllowedRoutes; ar != nil && ar.Namespaces != nil && ar.Namespaces.From != nil {
		l.from = *ar.Namespaces.From
	}
	if l.from == gwv1.NamespacesFromSelector {
		sel, err := metav1.LabelSelectorAsSelector(spec.AllowedRoutes.Namespaces.Selector)
		if err != nil {
			l.rejectReason = gwv1.ListenerReasonUnsupportedValue
			l.rejectMsg = fmt.Sprintf("allowedRoutes.namespaces.selector: %v", err)
		}
		l.selector = sel
	}

	if l.mode == snapshot.ModeTerminate {
		t.certificates(l) // TLS Terminate and HTTPS
	}
	return l
}

func routeGroupKind(kind string) gwv1.RouteGroupKind {
	g := gwv1.Group(groupGateway)
	return gwv1.RouteGroupKind{Group: &g, Kind: gwv1.Kind(kind)}
}

func groupKind(group, kind string) string {
	if group == "" {
		return kind
	}
	return group + "/" + kind
}

// allowsNamespace reports whether the listener admits routes from namespace ns.
func (t *translator) allowsNamespace(l *listener, ns string) bool {
	switch l.from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSelector:
		return l.selector != nil && l.selector.Matches(t.namespaceLabels(ns))
	case gwv1.NamespacesFromSame:
		return ns == l.gw.key.ns
	}
	return false
}

// markConflicts applies the listener distinctness rules within one Gateway: on one port, a
// TCP listener conflicts with every other listener, and an HTTP listener with every TLS or
// HTTPS listener (ProtocolConflict: one socket either reads a ClientHello first or plain
// HTTP); TLS and HTTPS listeners, which share one SNI table, and HTTP listeners, which share
// one Host table, conflict when their hostnames are the same (HostnameConflict).
func markConflicts(gw *gateway) {
	byPort := map[gwv1.PortNumber][]*listener{}
	var ports []gwv1.PortNumber
	for _, l := range gw.listeners {
		if l.routeKind == "" {
			continue // protocols we do not serve take part in no conflict
		}
		if _, ok := byPort[l.spec.Port]; !ok {
			ports = append(ports, l.spec.Port)
		}
		byPort[l.spec.Port] = append(byPort[l.spec.Port], l)
	}
	for _, port := range ports {
		ls := byPort[port]
		tcp := slices.ContainsFunc(ls, func(l *listener) bool { return l.routeKind == kindTCPRoute })
		if tcp && len(ls) > 1 {
			msg := fmt.Sprintf("listeners %s share port %d and a TCP listener takes the whole port", listenerNames(ls), port)
			for _, l := range ls {
				l.setConflict(gwv1.ListenerReasonProtocolConflict, msg)
			}
			continue
		}
		plain := slices.ContainsFunc(ls, func(l *listener) bool { return l.spec.Protocol == gwv1.HTTPProtocolType })
		overTLS := slices.ContainsFunc(ls, func(l *listener) bool { return l.spec.Protocol != gwv1.HTTPProtocolType })
		if plain && overTLS {
			msg := fmt.Sprintf("listeners %s share port %d but an HTTP listener cannot share a port with TLS or HTTPS listeners", listenerNames(ls), port)
			for _, l := range ls {
				l.setConflict(gwv1.ListenerReasonProtocolConflict, msg)
			}
			continue
		}
		byHost := map[string][]*listener{}
		for _, l := range ls {
			byHost[l.hostname] = append(byHost[l.hostname], l)
		}
		for _, l := range ls {
			if same := byHost[l.hostname]; len(same) > 1 {
				h := l.hostname
				if h == "" {
					h = "(any)"
				}
				l.setConflict(gwv1.ListenerReasonHostnameConflict,
					fmt.Sprintf("listeners %s share port %d and hostname %s", listenerNames(same), port, h))
			}
		}
	}
}

func (l *listener) setConflict(reason gwv1.ListenerConditionReason, msg string) {
	l.conflict, l.conflictMsg = reason, msg
	l.rejectReason, l.rejectMsg = reason, msg
}

func listenerNames(ls []*listener) string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = string(l.spec.Name)
	}
	return strings.Join(names, ", ")
}

// claimPorts gives every (address, port) to the oldest Gateway that listens there.
func (t *translator) claimPorts() {
	type claim struct {
		addr netip.Addr
		gw   *gateway
	}
	claims := map[gwv1.PortNumber][]claim{}
	for _, gw := range t.gateways {
		if gw.rejected() {
			continue
		}
		for _, l := range gw.listeners {
			if l.routeKind == "" || !l.accepted() {
				continue
			}
			port := l.spec.Port
			var taken *claim
			var mine netip.Addr
			for _, a := range gw.addrs {
				for i, c := range claims[port] {
					if c.gw != gw && overlaps(a, c.addr) {
						taken, mine = &claims[port][i], a
						break
					}
				}
				if taken != nil {
					break
				}
			}
			if taken != nil {
				l.rejectReason = gwv1.ListenerReasonPortUnavailable
				l.rejectMsg = fmt.Sprintf("%s is taken: the older Gateway %s listens on %s",
					netip.AddrPortFrom(mine, uint16(port)), taken.gw.key, netip.AddrPortFrom(taken.addr, uint16(port)))
				continue
			}
			for _, a := range gw.addrs {
				if !slices.ContainsFunc(claims[port], func(c claim) bool { return c.gw == gw && c.addr == a }) {
					claims[port] = append(claims[port], claim{a, gw})
				}
			}
		}
	}
}

// overlaps reports whether sockets bound to a and b on one port would collide: the same
// address, or an unspecified address covering the other (0.0.0.0 covers IPv4, :: covers all).
func overlaps(a, b netip.Addr) bool {
	if a == b {
		return true
	}
	covers := func(u, x netip.Addr) bool {
		return u.IsUnspecified() && (u.Is6() || x.Is4())
	}
	return covers(a, b) || covers(b, a)
}

// ---- snapshot ----

func (t *translator) snapshot() *snapshot.Snapshot {
	ports := map[string]*snapshot.Port{}
	var list []*snapshot.Port
	for _, gw := range t.gateways {
		if gw.rejected() {
			continue
		}
		for _, addr := range gw.addrs {
			for _, l := range gw.listeners {
				if !l.programmed() {
					continue
				}
				ap := netip.AddrPortFrom(addr, uint16(l.spec.Port)).String()
				p := ports[ap]
				if p == nil {
					p = &snapshot.Port{Address: ap, Port: l.spec.Port, MaxConnections: gw.maxConns, Protocol: snapshot.ProtocolTLS}
					switch {
					case l.routeKind == kindTCPRoute:
						p.Protocol = snapshot.ProtocolTCP
					case l.spec.Protocol == gwv1.HTTPProtocolType:
						p.Protocol = snapshot.ProtocolHTTP
					}
					ports[ap] = p
					list = append(list, p)
				}
				sl := t.snapshotListener(l)
				if p.Protocol == snapshot.ProtocolTCP {
					p.TCP = sl
				} else {
					p.Listeners.Add(l.hostname, sl)
				}
			}
		}
	}
	return snapshot.New(t.opts.Generation, list)
}

// snapshotListener builds the listener's routing table once; a Gateway with several
// addresses shares it between its sockets.
func (t *translator) snapshotListener(l *listener) *snapshot.Listener {
	if l.snap != nil {
		return l.snap
	}
	sl := &snapshot.Listener{Name: l.name(), TLS: l.tlsConfig}
	if l.routeKind == kindTLSRoute || l.spec.Protocol == gwv1.HTTPSProtocolType {
		sl.Mode = l.mode
	}
	l.snap = sl
	switch l.routeKind {
	case kindHTTPRoute:
		sl.HTTP = l.httpTable()
	case kindTCPRoute:
		if len(l.attached) > 0 {
			sl.Route = l.attached[0].route.snap // the oldest TCPRoute takes the port
		}
	case kindTLSRoute:
		key := listenerKey{l.gw.key, l.index}
		var m *memoListener
		if prev := t.memoListener(key); prev != nil && len(t.fresh)+len(t.removed) <= len(t.routeList)/2 {
			sl.Routes, m = t.patchRoutes(l, prev)
		} else {
			m = fillRoutes(l, &sl.Routes)
		}
		if t.listenersNext != nil {
			m.routes = &sl.Routes
			t.listenersNext[key] = m
		}
	}
	return sl
}

// memoListener returns the previous call's table of a listener when this call's routes
// came from the same memo.
func (t *translator) memoListener(key listenerKey) *memoListener {
	if !t.memoOK {
		return nil
	}
	return t.opts.Memo.listeners[key]
}

// fillRoutes fills a TLS listener's route table from its attachments.
func fillRoutes(l *listener, table *snapshot.HostTable[*snapshot.Route]) *memoListener {
	var exact, wild int
	for _, a := range l.attached {
		for _, h := range a.hostnames {
			if isWildcard(h) {
				wild++
			} else {
				exact++
			}
		}
	}
	table.Reserve(exact, wild)
	m := &memoListener{contested: map[string]bool{}}
	for _, a := range l.attached {
		for _, h := range a.hostnames {
			if !table.Add(h, a.route.snap) { // first (oldest) route wins a hostname
				m.contested[h] = true
			}
		}
	}
	return m
}

// patchRoutes derives a TLS listener's route table from the previous call's, with the
// attachments of the routes that are gone taken out and those of the new routes put in:
// a one-route change among 100 000 hostnames touches a few entries instead of building
// the table again (issue 6). The result is the table fillRoutes would build: a hostname
// belongs to the first route in precedence order that claims it, so where a hostname is
// contested the attachments are searched for its first claimant.
func (t *translator) patchRoutes(l *listener, prev *memoListener) (snapshot.HostTable[*snapshot.Route], *memoListener) {
	table := prev.routes.Edit()
	contested := prev.contested // only grows: sharing it with the previous call is fine
	var recheck map[string]bool
	mark := func(h string) {
		if recheck == nil {
			recheck = map[string]bool{}
		}
		recheck[h] = true
	}
	mine := func(ma memoAttachment) bool { return ma.gw == l.gw.key && ma.listener == l.index }
	for _, mr := range t.removed {
		r := mr.r
		for _, ma := range mr.attach {
			if !mine(ma) {
				continue
			}
			for _, h := range ma.a.hostnames {
				if v, ok := table.Get(h); ok && v == r.snap {
					table.Delete(h)
					if contested[h] {
						mark(h)
					}
				}
			}
		}
	}
	for _, r := range t.fresh { // in precedence order
		for _, ma := range t.memoNext[r.obj].attach {
			if !mine(ma) {
				continue
			}
			for _, h := range ma.a.hostnames {
				if recheck[h] {
					continue
				}
				if !table.Add(h, r.snap) {
					// Taken: by an older route, or by a newer one this route now beats.
					contested[h] = true
					mark(h)
				}
			}
		}
	}
	if len(recheck) > 0 {
		for h := range recheck {
			table.Delete(h)
		}
		for _, a := range l.attached {
			for _, h := range a.hostnames {
				if recheck[h] {
					table.Add(h, a.route.snap) // the first claimant wins
				}
			}
		}
	}
	return table, &memoListener{contested: contested}
}

// ---- status ----

func (t *translator) status() *Status {
	s := &Status{GatewayClasses: t.classStats}
	for _, gw := range t.gateways {
		s.Gateways = append(s.Gateways, GatewayStatus{Namespace: gw.key.ns, Name: gw.key.name, Status: t.gatewayStatus(gw)})
	}
	sortStatus(s.GatewayClasses)
	sortStatus(s.Gateways)
	// With the memo, the routes' status lists are the previous call's without the routes
	// that are gone and with the new ones: an unchanged route's status is the same, and a
	// one-route change should not sort 100 000 entries again (issue 6).
	routes, gone := t.routeList, map[string]map[nsName]bool(nil)
	prev := t.memoStatus()
	if prev != nil {
		routes, gone = t.fresh, map[string]map[nsName]bool{}
		for _, mr := range t.removed {
			r := mr.r
			if len(r.parents) > 0 {
				if gone[r.kind] == nil {
					gone[r.kind] = map[nsName]bool{}
				}
				gone[r.kind][nsName{r.meta.Namespace, r.meta.Name}] = true
			}
		}
	}
	var tls []TLSRouteStatus
	var tcp []TCPRouteStatus
	var http []HTTPRouteStatus
	for _, r := range routes {
		if len(r.parents) == 0 {
			continue
		}
		switch r.kind {
		case kindTLSRoute:
			tls = append(tls, TLSRouteStatus{Namespace: r.meta.Namespace, Name: r.meta.Name,
				Status: gwv1.TLSRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: r.parents}}})
		case kindTCPRoute:
			tcp = append(tcp, TCPRouteStatus{Namespace: r.meta.Namespace, Name: r.meta.Name,
				Status: gwv1.TCPRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: r.parents}}})
		case kindHTTPRoute:
			http = append(http, HTTPRouteStatus{Namespace: r.meta.Namespace, Name: r.meta.Name,
				Status: gwv1.HTTPRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: r.parents}}})
		}
	}
	sortStatus(tls)
	sortStatus(tcp)
	sortStatus(http)
	if prev == nil {
		s.TLSRoutes, s.TCPRoutes, s.HTTPRoutes = tls, tcp, http
	} else {
		s.TLSRoutes = patchStatus(prev.TLSRoutes, gone[kindTLSRoute], tls)
		s.TCPRoutes = patchStatus(prev.TCPRoutes, gone[kindTCPRoute], tcp)
		s.HTTPRoutes = patchStatus(prev.HTTPRoutes, gone[kindHTTPRoute], http)
	}
	return s
}

// memoStatus returns the previous call's status when this call's routes came from the
// same memo.
func (t *translator) memoStatus() *Status {
	if !t.memoOK || len(t.fresh)+len(t.removed) > len(t.routeList)/2 {
		return nil
	}
	return t.opts.Memo.status
}

// patchStatus merges the sorted list of new routes' status into the previous sorted list
// without the routes that are gone. A route's namespace and name are unique in its kind,
// so a replaced route (gone and new under one name) is its new entry only.
func patchStatus[T any](prev []ObjectStatus[T], gone map[nsName]bool, fresh []ObjectStatus[T]) []ObjectStatus[T] {
	if len(gone) == 0 && len(fresh) == 0 {
		return prev
	}
	out := make([]ObjectStatus[T], 0, len(prev)+len(fresh))
	for _, o := range prev {
		if gone[nsName{o.Namespace, o.Name}] {
			continue
		}
		for len(fresh) > 0 && compareStatus(fresh[0], o) < 0 {
			out, fresh = append(out, fresh[0]), fresh[1:]
		}
		out = append(out, o)
	}
	return append(out, fresh...)
}

func (t *translator) gatewayStatus(gw *gateway) gwv1.GatewayStatus {
	gen := gw.obj.Generation
	var st gwv1.GatewayStatus
	var accepted, programmed int
	var invalid []string
	for _, l := range gw.listeners {
		st.Listeners = append(st.Listeners, t.listenerStatus(l))
		if l.accepted() {
			accepted++
		}
		if l.programmed() {
			programmed++
		}
		if !l.accepted() || !l.programmed() {
			invalid = append(invalid, string(l.spec.Name))
		}
	}
	conds := conditions{gen: gen, now: t.now}
	switch {
	case gw.rejected():
		conds.set(string(gwv1.GatewayConditionAccepted), false, string(gw.rejectReason), gw.rejectMsg)
	case accepted == 0:
		conds.set(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid),
			"no listener is accepted: "+strings.Join(invalid, ", "))
	case len(invalid) > 0:
		conds.set(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonListenersNotValid),
			"Gateway is accepted, but these listeners are not valid and serve nothing: "+strings.Join(invalid, ", "))
	default:
		conds.set(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "Gateway is accepted")
	}
	if programmed > 0 {
		conds.set(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed),
			fmt.Sprintf("%d of %d listeners are programmed", programmed, len(gw.listeners)))
		for _, a := range gw.addrs {
			st.Addresses = append(st.Addresses, gwv1.GatewayStatusAddress{Type: ptr(gwv1.IPAddressType), Value: a.String()})
		}
	} else {
		conds.set(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "no listener is programmed")
	}
	st.Conditions = conds.list
	return st
}

func (t *translator) listenerStatus(l *listener) gwv1.ListenerStatus {
	conds := conditions{gen: l.gw.obj.Generation, now: t.now}
	if l.accepted() {
		conds.set(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "Listener is accepted")
	} else {
		conds.set(string(gwv1.ListenerConditionAccepted), false, string(l.rejectReason), l.rejectMsg)
	}
	if l.programmed() {
		conds.set(string(gwv1.ListenerConditionProgrammed), true, string(gwv1.ListenerReasonProgrammed), "Listener is programmed")
	} else {
		var why string
		switch {
		case l.gw.rejected():
			why = "the Gateway is not accepted"
		case !l.accepted():
			why = "the listener is not accepted"
		case l.refsReason != "":
			why = "its certificateRefs do not resolve"
		default:
			why = "it allows no supported route kind"
		}
		conds.set(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), "Listener is not programmed: "+why)
	}
	switch {
	case l.refsReason != "":
		msg := l.refsMsg
		if l.kindsMsg != "" {
			msg += "; " + l.kindsMsg
		}
		conds.set(string(gwv1.ListenerConditionResolvedRefs), false, string(l.refsReason), msg)
	case l.kindsMsg != "":
		conds.set(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds), l.kindsMsg)
	default:
		conds.set(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "All references are resolved")
	}
	if l.conflict != "" {
		conds.set(string(gwv1.ListenerConditionConflicted), true, string(l.conflict), l.conflictMsg)
	} else {
		conds.set(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "No conflicts")
	}
	return gwv1.ListenerStatus{
		Name:           l.spec.Name,
		SupportedKinds: l.supportedKinds,
		AttachedRoutes: int32(len(l.attached)),
		Conditions:     conds.list,
	}
}

func ptr[T any](v T) *T { return &v }
