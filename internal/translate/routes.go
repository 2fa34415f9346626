package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/snapshot"
)

// route is a TLSRoute, TCPRoute or HTTPRoute seen through what they have in common.
type route struct {
	obj        any // the TLSRoute, TCPRoute or HTTPRoute
	kind       string
	meta       *metav1.ObjectMeta
	parentRefs []gwv1.ParentReference
	hostnames  []string // TLSRoute and HTTPRoute, lower case
	// ruleRefs are the backendRefs of each rule (TLSRoute and TCPRoute have one rule).
	ruleRefs [][]gwv1.BackendRef
	http     *gwv1.HTTPRoute

	snap           *snapshot.Route   // the first rule's backends (TLSRoute, TCPRoute)
	ruleSnaps      []*snapshot.Route // every rule's backends
	httpMatches    []*snapshot.HTTPMatch
	resolvedReason gwv1.RouteConditionReason // "" when every backendRef resolves
	resolvedMsg    string
	// unsupported, when set, makes the route Accepted=False/UnsupportedValue everywhere: it
	// uses a feature snigate does not implement, and serving it without would be wrong.
	unsupported string
	parents     []gwv1.RouteParentStatus
	// memo is this route's entry in the Memo, when there is one.
	memo *memoRoute
}

func (r *route) String() string { return r.kind + "/" + r.meta.Namespace + "/" + r.meta.Name }

// lowerHostnames is a route's hostnames in lower case, the form every comparison uses. The
// list is sized at once, as attach's list of effective hostnames is: grown by append, the two
// left about 3 MB of garbage in a first load of 100 000 names (5 % of what it allocates).
func lowerHostnames(hs []gwv1.Hostname) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = strings.ToLower(string(h))
	}
	return out
}

func (t *translator) buildRoutes() {
	var fresh []*route // not taken from the memo
	add := func(obj any, build func() *route) {
		if mr := t.memoRoute(obj); mr != nil {
			mr.call = t.opts.Memo.call
			t.nReused++
			return
		}
		r := build()
		r.obj = obj
		fresh = append(fresh, r)
	}
	for _, tr := range t.in.TLSRoutes {
		add(tr, func() *route {
			r := &route{kind: kindTLSRoute, meta: &tr.ObjectMeta, parentRefs: tr.Spec.ParentRefs, hostnames: lowerHostnames(tr.Spec.Hostnames)}
			if len(tr.Spec.Rules) > 0 {
				r.ruleRefs = [][]gwv1.BackendRef{tr.Spec.Rules[0].BackendRefs}
			}
			return r
		})
	}
	for _, tr := range t.in.TCPRoutes {
		add(tr, func() *route {
			r := &route{kind: kindTCPRoute, meta: &tr.ObjectMeta, parentRefs: tr.Spec.ParentRefs}
			if len(tr.Spec.Rules) > 0 {
				r.ruleRefs = [][]gwv1.BackendRef{tr.Spec.Rules[0].BackendRefs}
			}
			return r
		})
	}
	for _, hr := range t.in.HTTPRoutes {
		add(hr, func() *route {
			r := &route{kind: kindHTTPRoute, meta: &hr.ObjectMeta, parentRefs: hr.Spec.ParentRefs, http: hr, hostnames: lowerHostnames(hr.Spec.Hostnames)}
			for _, rule := range hr.Spec.Rules {
				refs := make([]gwv1.BackendRef, len(rule.BackendRefs))
				for i := range rule.BackendRefs {
					refs[i] = rule.BackendRefs[i].BackendRef
				}
				r.ruleRefs = append(r.ruleRefs, refs)
			}
			return r
		})
	}
	// Precedence: routes attach to listeners in this order, and the snapshot gives a
	// hostname (or a TCP port) to the first route that claims it. Routes from the memo are
	// in this order already; the others are merged in.
	slices.SortFunc(fresh, precedence)
	t.fresh = fresh
	if t.memoOK {
		// The memo's map of routes is updated in place: a change costs the routes that
		// changed, not a new map of them all.
		kept := make([]*route, 0, t.nReused)
		for _, r := range t.opts.Memo.order {
			if t.reused(r) {
				kept = append(kept, r)
			} else {
				t.removed = append(t.removed, r.memo)
				delete(t.memoNext, r.obj)
			}
		}
		t.routeList = merge(kept, fresh, precedence)
	} else {
		t.routeList = fresh
	}
	for _, r := range t.routeList {
		if t.reused(r) {
			for _, ma := range r.memo.attach {
				t.gwByName[ma.gw].listeners[ma.listener].attach(ma.a)
			}
			continue
		}
		var mr *memoRoute
		if t.memoNext != nil {
			mr = &memoRoute{r: r}
			r.memo = mr
			t.memoNext[r.obj] = mr
		}
		t.resolveBackends(r)
		if r.kind == kindHTTPRoute {
			buildHTTPMatches(r)
		}
		for _, ref := range r.parentRefs {
			group, kind := groupGateway, kindGateway
			if ref.Group != nil {
				group = string(*ref.Group)
			}
			if ref.Kind != nil {
				kind = string(*ref.Kind)
			}
			if group != groupGateway || (kind != kindGateway && kind != kindListenerSet) {
				continue // a Service (mesh) or another parent kind: not ours
			}
			ns := r.meta.Namespace
			if ref.Namespace != nil && *ref.Namespace != "" {
				ns = string(*ref.Namespace)
			}
			if kind == kindListenerSet {
				set := t.setByName[nsName{ns, string(ref.Name)}]
				if set == nil {
					continue // no ListenerSet of one of our Gateways: not ours to report
				}
				r.parents = append(r.parents, t.attach(r, set.gw, set, ref, mr))
				continue
			}
			gw := t.gwByName[nsName{ns, string(ref.Name)}]
			if gw == nil {
				continue // not one of our Gateways (or none at all): not ours to report
			}
			r.parents = append(r.parents, t.attach(r, gw, nil, ref, mr))
		}
	}
}

// precedence orders routes: oldest first, then namespace/name, then kind.
func precedence(a, b *route) int {
	return cmp.Or(olderFirst(a.meta, b.meta), cmp.Compare(a.kind, b.kind))
}

// merge merges two sorted lists.
func merge[T any](a, b []T, compare func(x, y T) int) []T {
	out := make([]T, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if compare(b[0], a[0]) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// attach adds a route's attachment, once per route.
func (l *listener) attach(a *attachment) {
	if !l.attachedTo(a.route) {
		l.attached = append(l.attached, a)
	}
}

// attachedTo reports whether r is attached to the listener. Routes attach one after the
// other in precedence order, so only the last attachment can be r's: no set is needed.
func (l *listener) attachedTo(r *route) bool {
	return len(l.attached) > 0 && l.attached[len(l.attached)-1].route == r
}

// attach binds a route to the listeners its parentRef selects, of gw's own or, with set, of
// that ListenerSet's, and reports the result; mr, when not nil, records the attachments for
// the memo.
func (t *translator) attach(r *route, gw *gateway, set *listenerSet, ref gwv1.ParentReference, mr *memoRoute) gwv1.RouteParentStatus {
	// Room for the two conditions of a route's parent: Accepted here, ResolvedRefs in
	// parentStatus.
	conds := conditions{gen: r.meta.Generation, now: t.now, list: make([]metav1.Condition, 0, 2)}
	accept := func(ok bool, reason gwv1.RouteConditionReason, msg string) {
		conds.set(string(gwv1.RouteConditionAccepted), ok, string(reason), msg)
	}
	parent, own := "Gateway "+gw.key.String(), gw.listeners
	if set != nil {
		parent, own = "ListenerSet "+set.key.String(), set.listeners
		if set.rejected() {
			accept(false, gwv1.RouteReasonNotAllowedByListeners, fmt.Sprintf("%s is not accepted: %s", parent, set.rejectMsg))
			return t.parentStatus(r, ref, kindListenerSet, conds)
		}
	}

	// A hostname the Gateway gives to another namespace's route refuses the whole route.
	for _, h := range r.hostnames {
		if owner, ok := gw.owners[h]; ok && !strings.HasPrefix(owner, r.meta.Namespace+"/") {
			accept(false, ReasonHostnameConflict, fmt.Sprintf(
				"hostname %s on Gateway %s is %s's (annotation %s: a platform namespace's route wins, then the older route, then namespace/name)",
				h, gw.key, owner, HostnameOwnersAnnotation))
			return t.parentStatus(r, ref, parentKind(set), conds)
		}
	}
	var candidates []*listener
	for _, l := range own {
		if l.set != set {
			continue // a ListenerSet's listener: only a parentRef to that set selects it
		}
		if ref.SectionName != nil && *ref.SectionName != l.spec.Name {
			continue
		}
		if ref.Port != nil && *ref.Port != l.spec.Port {
			continue
		}
		candidates = append(candidates, l)
	}
	var allowed []*listener
	var refusals []string
	for _, l := range candidates {
		switch {
		case l.routeKind != r.kind || len(l.supportedKinds) == 0:
			kinds := "none"
			if len(l.supportedKinds) > 0 {
				kinds = l.routeKind
			}
			refusals = append(refusals, fmt.Sprintf("listener %s takes no %s (supported kinds: %s)", l.spec.Name, r.kind, kinds))
		case !t.allowsNamespace(l, r.meta.Namespace):
			refusals = append(refusals, fmt.Sprintf("listener %s does not allow routes from namespace %s (from: %s)", l.spec.Name, r.meta.Namespace, l.from))
		case l.redirectsOnly && !plaintextSafe(r.http):
			refusals = append(refusals, fmt.Sprintf("listener %s serves plaintext HTTP only to redirect to https and to answer ACME HTTP-01 challenges (annotation %s): give the route a parentRef sectionName of an HTTPS listener", l.spec.Name, PlaintextListenersAnnotation))
		default:
			allowed = append(allowed, l)
		}
	}
	type match struct {
		l     *listener
		hosts []string
	}
	var matched []match
	for _, l := range allowed {
		if r.kind == kindTCPRoute {
			matched = append(matched, match{l, nil})
			continue
		}
		if r.kind == kindHTTPRoute && len(r.hostnames) == 0 {
			// An HTTPRoute without hostnames serves whatever its listener serves.
			matched = append(matched, match{l, []string{l.hostname}})
			continue
		}
		hosts := effectiveHostnames(l.hostname, r.hostnames)
		if len(hosts) > 0 {
			matched = append(matched, match{l, hosts})
		}
	}

	switch {
	case len(candidates) == 0:
		accept(false, gwv1.RouteReasonNoMatchingParent, fmt.Sprintf("%s has no listener %s", parent, describeSelection(ref)))
	case len(allowed) == 0:
		accept(false, gwv1.RouteReasonNotAllowedByListeners, fmt.Sprintf("%s: %s", parent, strings.Join(refusals, "; ")))
	case len(matched) == 0:
		var lh []string
		for _, l := range allowed {
			lh = append(lh, string(l.spec.Name)+"="+cmp.Or(l.hostname, "(any)"))
		}
		accept(false, gwv1.RouteReasonNoMatchingListenerHostname,
			fmt.Sprintf("no route hostname (%s) intersects a listener hostname (%s)", strings.Join(r.hostnames, ", "), strings.Join(lh, ", ")))
	case r.unsupported != "":
		accept(false, gwv1.RouteReasonUnsupportedValue, r.unsupported)
	default:
		var names, idle []string
		for _, m := range matched {
			names = append(names, string(m.l.spec.Name))
			if !m.l.programmed() {
				idle = append(idle, string(m.l.spec.Name))
			}
			if !m.l.attachedTo(r) {
				a := &attachment{route: r, hostnames: m.hosts}
				m.l.attach(a)
				if mr != nil {
					mr.attach = append(mr.attach, memoAttachment{gw: gw.key, listener: m.l.index, a: a})
				}
			}
		}
		msg := "Route is attached to listeners " + strings.Join(names, ", ") + " of " + parent
		switch {
		case gw.rejected():
			msg += "; nothing is served: the Gateway is not accepted"
		case len(idle) > 0:
			msg += fmt.Sprintf("; not served on %s: not programmed", strings.Join(idle, ", "))
		}
		accept(true, gwv1.RouteReasonAccepted, msg)
	}
	return t.parentStatus(r, ref, parentKind(set), conds)
}

// effectiveHostnames is what a route's hostnames (lower case) become on a listener with
// the given hostname: each intersection, once. Where every hostname is its own intersection
// and none repeats (a listener without a hostname, or a wildcard covering them all: the
// common case), it is the route's own list, shared rather than copied, as nothing changes
// either list after translation builds it; a first load of 100 000 hostnames copied 1.4 MB.
func effectiveHostnames(listener string, hostnames []string) []string {
	var hosts []string // nil while hostnames[:i] is the answer so far
	for i, h := range hostnames {
		eff, ok := intersect(listener, h)
		if hosts == nil && ok && eff == h && !slices.Contains(hostnames[:i], h) {
			continue
		}
		if hosts == nil {
			hosts = make([]string, i, len(hostnames)) // at most one per hostname
			copy(hosts, hostnames[:i])
		}
		if ok && !slices.Contains(hosts, eff) {
			hosts = append(hosts, eff)
		}
	}
	if hosts == nil {
		return hostnames
	}
	return hosts
}

func parentKind(set *listenerSet) string {
	if set != nil {
		return kindListenerSet
	}
	return kindGateway
}

// parentStatus is a route's status for one parentRef, with its ResolvedRefs condition.
func (t *translator) parentStatus(r *route, ref gwv1.ParentReference, kind string, conds conditions) gwv1.RouteParentStatus {
	if r.resolvedReason == "" {
		conds.set(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "All backendRefs are resolved")
	} else {
		conds.set(string(gwv1.RouteConditionResolvedRefs), false, string(r.resolvedReason), r.resolvedMsg)
	}
	pr := *ref.DeepCopy()
	pr.Group = ptr(gwv1.Group(groupGateway))
	pr.Kind = ptr(gwv1.Kind(kind))
	return gwv1.RouteParentStatus{
		ParentRef:      pr,
		ControllerName: gwv1.GatewayController(t.opts.ControllerName),
		Conditions:     conds.list,
	}
}

func describeSelection(ref gwv1.ParentReference) string {
	var parts []string
	if ref.SectionName != nil {
		parts = append(parts, fmt.Sprintf("named %q", *ref.SectionName))
	}
	if ref.Port != nil {
		parts = append(parts, fmt.Sprintf("on port %d", *ref.Port))
	}
	return strings.Join(parts, " ")
}

// ---- backends ----

func (t *translator) resolveBackends(r *route) {
	var problems []string
	for ri, refs := range r.ruleRefs {
		backends := make([]snapshot.Backend, 0, len(refs))
		for i, ref := range refs {
			b, reason, msg := t.backend(r, ref)
			if reason != "" {
				b.Reason = string(reason)
				field := fmt.Sprintf("backendRefs[%d]", i)
				if r.kind == kindHTTPRoute {
					field = fmt.Sprintf("rules[%d].", ri) + field
				}
				problems = append(problems, field+": "+msg)
				if r.resolvedReason == "" {
					r.resolvedReason = reason
				}
			}
			backends = append(backends, b)
		}
		r.ruleSnaps = append(r.ruleSnaps, snapshot.NewRoute(r.String(), backends))
	}
	r.resolvedMsg = strings.Join(problems, "; ")
	if len(r.ruleSnaps) > 0 {
		r.snap = r.ruleSnaps[0]
	} else {
		r.snap = snapshot.NewRoute(r.String(), []snapshot.Backend{})
	}
}

// backend resolves one backendRef. A non-empty reason means the backend is invalid and
// rejects its share of connections.
func (t *translator) backend(r *route, ref gwv1.BackendRef) (snapshot.Backend, gwv1.RouteConditionReason, string) {
	group, kind := "", kindService
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	ns := r.meta.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	weight := int32(1)
	if ref.Weight != nil {
		weight = *ref.Weight
	}
	var port int32
	if ref.Port != nil {
		port = *ref.Port
	}
	b := snapshot.Backend{Name: ns + "/" + string(ref.Name) + ":" + strconv.Itoa(int(port)), Weight: weight}
	if group != "" || kind != kindService {
		b.Name = groupKind(group, kind) + " " + ns + "/" + string(ref.Name)
		return b, gwv1.RouteReasonInvalidKind, fmt.Sprintf("%s is not supported, only core Services", groupKind(group, kind))
	}
	if ns != r.meta.Namespace && !t.granted(r.kind, r.meta.Namespace, kindService, ns, string(ref.Name)) {
		return b, gwv1.RouteReasonRefNotPermitted,
			fmt.Sprintf("Service %s/%s is in another namespace and no ReferenceGrant in %s allows %s from %s", ns, ref.Name, ns, r.kind, r.meta.Namespace)
	}
	svc := t.services[nsName{ns, string(ref.Name)}]
	if svc == nil {
		return b, gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s not found", ns, ref.Name)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return b, gwv1.RouteReasonInvalidKind, fmt.Sprintf("Service %s/%s is of type ExternalName, which snigate does not follow", ns, ref.Name)
	}
	sp := ServicePort(svc, port)
	if sp == nil {
		return b, gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s has no TCP port %d", ns, ref.Name, port)
	}
	b.Endpoints = Endpoints(t.slices[nsName{ns, svc.Name}], sp.Name)
	b.Proxy = t.proxyOut[nsName{ns, svc.Name}]
	if len(b.Endpoints) == 0 {
		b.Reason = ReasonNoReadyEndpoints // snapshot only: the reference itself resolved
	}
	return b, "", ""
}

// ServicePort is svc's TCP port numbered port, or nil: the port a backendRef names.
func ServicePort(svc *corev1.Service, port int32) *corev1.ServicePort {
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Port == port && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
			return p
		}
	}
	return nil
}

// Endpoints returns the ready addresses of the Service port named portName, from eps,
// the EndpointSlices labelled with the Service's name: the slice port with the Service
// port's name gives the port number. The addresses are the ones the data plane dials, in a
// stable order; the certificate probe (package render) asks it too.
func Endpoints(eps []*discoveryv1.EndpointSlice, portName string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, es := range eps {
		if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN endpoints are not followed
		}
		var port int32
		for _, p := range es.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == portName && p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
				port = *p.Port
				break
			}
		}
		if port <= 0 || port > 65535 {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				ap := netip.AddrPortFrom(ip.Unmap(), uint16(port))
				if !slices.Contains(out, ap) {
					out = append(out, ap)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return out
}

// plaintextSafe reports whether every rule of an HTTPRoute either redirects to https or
// matches only ACME HTTP-01 challenge paths: what may be served on a plaintext listener.
func plaintextSafe(h *gwv1.HTTPRoute) bool {
	if h == nil {
		return false
	}
	for _, rule := range h.Spec.Rules {
		if !redirectsToHTTPS(rule) && !challengeOnly(rule) {
			return false
		}
	}
	return len(h.Spec.Rules) > 0
}

func redirectsToHTTPS(rule gwv1.HTTPRouteRule) bool {
	for _, f := range rule.Filters {
		if f.Type == gwv1.HTTPRouteFilterRequestRedirect && f.RequestRedirect != nil &&
			f.RequestRedirect.Scheme != nil && *f.RequestRedirect.Scheme == "https" {
			return true
		}
	}
	return false
}

// challengeOnly: every match has an Exact or PathPrefix path under the challenge prefix.
func challengeOnly(rule gwv1.HTTPRouteRule) bool {
	const prefix = "/.well-known/acme-challenge/"
	if len(rule.Matches) == 0 {
		return false
	}
	for _, m := range rule.Matches {
		if m.Path == nil || m.Path.Value == nil || m.Path.Type == nil ||
			(*m.Path.Type != gwv1.PathMatchExact && *m.Path.Type != gwv1.PathMatchPathPrefix) ||
			!strings.HasPrefix(*m.Path.Value, prefix) {
			return false
		}
	}
	return true
}
