package translate

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/access"
	"github.com/snigate/snigate/internal/snapshot"
)

// ---- GatewayClasses ----

// gatewayClasses accepts every GatewayClass of our controllerName, in name order.
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
				SupportedFeatures: Features(t.opts),
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
	obj      *gwv1.Gateway
	key      nsName
	addrs    []netip.Addr
	maxConns int
	// maxListeners caps its own and its ListenerSets' listeners (MaxListenersAnnotation;
	// 0: no cap).
	maxListeners int
	listeners    []*listener
	// owners maps contested hostnames to the route that owns them: "namespace/Kind/name"
	// (HostnameOwnersAnnotation).
	owners map[string]string

	// unusable says which spec.addresses are outside Options.UsableAddresses: the Gateway
	// is then Programmed=False/AddressNotUsable.
	unusable []string

	// rejectReason is set when the Gateway as a whole is not accepted, before its
	// listeners are looked at.
	rejectReason gwv1.GatewayConditionReason
	rejectMsg    string
}

func (gw *gateway) rejected() bool { return gw.rejectReason != "" }

type listener struct {
	gw    *gateway
	index int // in gw.listeners: the Gateway's own, then each ListenerSet's
	// set is the ListenerSet the listener comes from; nil for the Gateway's own.
	set *listenerSet
	// ns is the namespace of the object that defines the listener: allowedRoutes "Same"
	// and certificateRefs without a namespace mean it.
	ns       string
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
	// access are the AccessPolicies on the listener, by level (access.go).
	access [levels]*access.Policy
	// redirectsOnly: an HTTP listener of PlaintextListenersAnnotation, which takes only
	// HTTPRoutes that serve no application (plaintextSafe).
	redirectsOnly bool
}

type attachment struct {
	route     *route
	hostnames []string // effective hostnames on this listener (TLSRoute)
}

func (l *listener) accepted() bool { return l.rejectReason == "" }

func (l *listener) programmed() bool {
	return !l.gw.rejected() && l.accepted() && l.refsReason == "" && len(l.supportedKinds) > 0
}

// name identifies the listener in the snapshot, logs and metrics: Gateway/listener, or
// Gateway/ListenerSet-namespace/ListenerSet/listener (a set's listener may have the name of
// one of the Gateway's own).
func (l *listener) name() string {
	n := l.gw.key.ns + "/" + l.gw.key.name + "/"
	if l.set != nil {
		n += l.set.key.ns + "/" + l.set.key.name + "/"
	}
	return n + string(l.spec.Name)
}

// generation is the generation of the object that defines the listener.
func (l *listener) generation() int64 {
	if l.set != nil {
		return l.set.obj.Generation
	}
	return l.gw.obj.Generation
}

// ownerKind is the kind a ReferenceGrant names for the listener's certificateRefs.
func (l *listener) ownerKind() string {
	if l.set != nil {
		return kindListenerSet
	}
	return kindGateway
}

// buildGateways builds our Gateways, oldest first: the order in which they claim ports, and
// adds the listeners of the ListenerSets they allow.
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
	t.buildListenerSets()
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
		} else if t.opts.ProvisionedAddresses {
			continue // the load balancer picks one of its own
		}
		if u := t.opts.UsableAddresses; u.IsValid() && !u.Contains(addr) {
			why := "this data plane can bind (it binds %s)"
			if t.opts.ProvisionedAddresses {
				why = "the load balancer can assign (it assigns from %s)"
			}
			gw.unusable = append(gw.unusable, fmt.Sprintf("spec.addresses[%d]: %s is not an address "+why, i, addr, u))
			continue
		}
		if !slices.Contains(gw.addrs, addr) {
			gw.addrs = append(gw.addrs, addr)
		}
	}
	switch {
	case t.opts.ProvisionedAddresses:
		// The load balancer holds spec.addresses and forwards to the Pod, which listens
		// on its own addresses.
		gw.addrs = []netip.Addr{t.defaultAddr}
	case len(gw.addrs) == 0 && len(gw.unusable) == 0:
		gw.addrs = []netip.Addr{t.defaultAddr}
	}
	// A count annotation that is not a number (or too small) rejects the Gateway rather
	// than serving it without the cap its owner asked for.
	count := func(name string, least int, what string) int {
		v, ok := g.Annotations[name]
		if !ok {
			return 0
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < least {
			reject(gwv1.GatewayReasonInvalid, fmt.Sprintf("metadata.annotations[%s]: %q is not a %s integer", name, v, what))
			return 0
		}
		return n
	}
	gw.maxConns = count(MaxConnectionsAnnotation, 0, "non-negative")
	gw.maxListeners = count(MaxListenersAnnotation, 1, "positive")
	for _, e := range strings.Split(g.Annotations[HostnameOwnersAnnotation], ",") {
		host, owner, ok := strings.Cut(strings.TrimSpace(e), "=")
		if ok && host != "" && strings.Count(owner, "/") == 2 {
			if gw.owners == nil {
				gw.owners = map[string]string{}
			}
			gw.owners[strings.ToLower(host)] = owner
		}
	}
	plaintext := plaintextListeners(g.Annotations)
	for i := range g.Spec.Listeners {
		l := t.listener(gw, nil, &g.Spec.Listeners[i])
		l.index = i
		l.redirectsOnly = plaintext[string(l.spec.Name)] && l.spec.Protocol == gwv1.HTTPProtocolType
		gw.listeners = append(gw.listeners, l)
	}
	markConflicts(gw.listeners)
	return gw
}

// plaintextListeners are the listener names of PlaintextListenersAnnotation (on a Gateway or
// a ListenerSet).
func plaintextListeners(annotations map[string]string) map[string]bool {
	plaintext := map[string]bool{}
	for _, n := range strings.Split(annotations[PlaintextListenersAnnotation], ",") {
		if n = strings.TrimSpace(n); n != "" {
			plaintext[n] = true
		}
	}
	return plaintext
}

func (t *translator) listener(gw *gateway, set *listenerSet, spec *gwv1.Listener) *listener {
	l := &listener{gw: gw, set: set, ns: gw.key.ns, spec: spec, supportedKinds: []gwv1.RouteGroupKind{}}
	if set != nil {
		l.ns = set.key.ns
	}
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
		sel, err := t.selector(spec.AllowedRoutes.Namespaces.Selector)
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
		return ns == l.ns
	}
	return false
}

// markConflicts applies the listener distinctness rules among the listeners of one object (a
// Gateway's own, or one ListenerSet's; conflictBetween settles those between them): on one port, a
// TCP listener conflicts with every other listener, and an HTTP listener with every TLS or
// HTTPS listener (ProtocolConflict: one socket either reads a ClientHello first or plain
// HTTP); TLS and HTTPS listeners, which share one SNI table, and HTTP listeners, which share
// one Host table, conflict when their hostnames are the same (HostnameConflict).
func markConflicts(listeners []*listener) {
	byPort := map[gwv1.PortNumber][]*listener{}
	var ports []gwv1.PortNumber
	for _, l := range listeners {
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

// claimPorts gives every (address, port) to the oldest Gateway that listens there. A
// provisioned Gateway has a data plane (Pods, load balancer address) of its own, so
// Gateways never share a socket and every one keeps its ports.
func (t *translator) claimPorts() {
	if t.opts.ProvisionedAddresses {
		return
	}
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
