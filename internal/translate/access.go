package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/access"
)

// AccessPolicies (direct policy attachment, GEP-713). A policy applies to each target it
// names, in its own namespace: a Gateway (every listener of it, its ListenerSets' listeners
// included) or one listener of it (sectionName), a ListenerSet or one of its listeners, a
// TLSRoute or a TCPRoute. A connection is checked against every policy on its path (the
// proxy's decide: the listener's, then the route's), so that a platform's policy on a
// Gateway and a tenant's on its route both hold.
//
// Each target takes one policy: of two naming the very same target (kind, name and
// sectionName), the older (creationTimestamp, then namespace/name) applies and the other is
// Accepted=False/Conflicted there. A Gateway-wide policy and one on a listener of it name
// different targets: both apply.
//
// Plain HTTP listeners are never checked: they redirect to https and answer ACME HTTP-01
// challenges, which come from anywhere. A policy that names only such listeners is
// Invalid; one on a whole Gateway says which it leaves out.
//
// Each policy's ancestors are its targets (as a BackendPolicy's are its Services).

// AccessPolicyStatus is the status of an AccessPolicy.
type AccessPolicyStatus = ObjectStatus[gwv1.PolicyStatus]

// AccessPolicy returns the status of an AccessPolicy, or nil.
func (s *Status) AccessPolicy(namespace, name string) *gwv1.PolicyStatus {
	return find(s.AccessPolicies, namespace, name)
}

// RouteAccess lists the AccessPolicies a connection to one TLSRoute or TCPRoute must pass,
// over every listener it is attached to: the DatabaseExposures' status shows it.
type RouteAccess struct {
	Kind      string                   `json:"kind"`
	Namespace string                   `json:"namespace"`
	Name      string                   `json:"name"`
	Access    []v1alpha1.AccessInForce `json:"access"`
}

// Access returns what a connection to route kind/namespace/name must pass (nil: nothing).
func (s *Status) Access(kind, namespace, name string) []v1alpha1.AccessInForce {
	i, ok := slices.BinarySearchFunc(s.RouteAccess, [3]string{kind, namespace, name}, func(r RouteAccess, k [3]string) int {
		return cmp.Or(cmp.Compare(r.Kind, k[0]), cmp.Compare(r.Namespace, k[1]), cmp.Compare(r.Name, k[2]))
	})
	if !ok {
		return nil
	}
	return s.RouteAccess[i].Access
}

// The levels of a listener's policies, in the order a connection is checked.
const (
	levelGateway = iota
	levelGatewayListener
	levelSet
	levelSetListener
	levels
)

// accessTarget names one target exactly, for conflicts.
type accessTarget struct {
	kind, ns, name, section string
}

// accessPolicies attaches each AccessPolicy to its targets (listener.access, and the
// snapshot routes of route targets) and makes their status. It runs after the routes are
// attached (buildRoutes).
func (t *translator) accessPolicies() {
	if len(t.in.AccessPolicies) == 0 {
		return
	}
	pols := slices.Clone(t.in.AccessPolicies)
	slices.SortFunc(pols, func(a, b *v1alpha1.AccessPolicy) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	// The routes the policies name, found in one pass over the routes.
	routes := map[accessTarget]*route{}
	for _, p := range pols {
		for _, ref := range p.Spec.TargetRefs {
			if ref.Kind == kindTLSRoute || ref.Kind == kindTCPRoute {
				routes[accessTarget{string(ref.Kind), p.Namespace, string(ref.Name), ""}] = nil
			}
		}
	}
	if len(routes) > 0 {
		for _, r := range t.routeList {
			k := accessTarget{r.kind, r.meta.Namespace, r.meta.Name, ""}
			if _, want := routes[k]; want {
				routes[k] = r
			}
		}
	}
	owner := map[accessTarget]*v1alpha1.AccessPolicy{}
	for _, p := range pols {
		spec := accessSpec(&p.Spec.Access)
		name := p.Namespace + "/" + p.Name
		var ancestors []gwv1.PolicyAncestorStatus
		for _, ref := range p.Spec.TargetRefs {
			target := accessTarget{string(ref.Kind), p.Namespace, string(ref.Name), ""}
			if ref.SectionName != nil {
				target.section = string(*ref.SectionName)
			}
			ar := gwv1.ParentReference{Group: ptr(gwv1.Group(gwv1.GroupName)), Kind: ptr(ref.Kind),
				Namespace: ptr(gwv1.Namespace(p.Namespace)), Name: ref.Name, SectionName: ref.SectionName}
			c := t.policyCondition(&p.ObjectMeta)
			var attach func(*access.Policy)
			var where string
			switch ref.Kind {
			case kindGateway, kindListenerSet:
				var ok bool
				if attach, where, ok = t.accessListeners(target, &c); !ok {
					if c.Reason != "" && c.Reason != string(gwv1.PolicyReasonAccepted) {
						ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
					}
					continue
				}
			default:
				r, found := routes[target]
				switch {
				case !found || r == nil:
					c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound), fmt.Sprintf("%s %s/%s not found", ref.Kind, p.Namespace, ref.Name)
					ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
					continue
				case len(r.parents) == 0:
					continue // attached to no Gateway of ours: not ours to say anything about
				}
				where = fmt.Sprintf("%s %s/%s", r.kind, r.meta.Namespace, r.meta.Name)
				attach = func(pol *access.Policy) {
					// A route taken from the memo keeps its snapshot route, which holds the
					// very same policies (the memo is only used when no policy changed).
					if !t.reused(r) {
						r.snap.Access = append(r.snap.Access, pol)
					}
				}
			}
			if prev := owner[target]; prev != nil && prev != p {
				c.Status, c.Reason = metav1.ConditionFalse, string(gwv1.PolicyReasonConflicted)
				c.Message = fmt.Sprintf("AccessPolicy %s/%s, older, targets %s too and applies there", prev.Namespace, prev.Name, where)
				ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
				continue
			}
			compiled := access.New(name, describeTarget(target), spec)
			if owner[target] == nil {
				owner[target] = p
				attach(compiled)
			}
			c.Message = fmt.Sprintf("every connection to %s is checked: %s", where, compiled) + c.Message
			ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
		}
		t.accessPolicyStats = append(t.accessPolicyStats, AccessPolicyStatus{Namespace: p.Namespace, Name: p.Name,
			Status: gwv1.PolicyStatus{Ancestors: ancestors}})
	}
}

// accessListeners resolves a Gateway or ListenerSet target: the function that puts the
// compiled policy on its listeners, and where that is for the status message. Without ok
// there is nothing to attach to: c then says why (TargetNotFound, Invalid), or nothing when
// the target is not ours to speak of. On success c.Message may hold a suffix to append.
func (t *translator) accessListeners(target accessTarget, c *metav1.Condition) (attach func(*access.Policy), where string, ok bool) {
	key := nsName{target.ns, target.name}
	var own []*listener
	level := levelGateway
	switch target.kind {
	case kindGateway:
		gw := t.gwByName[key]
		if gw == nil {
			if !t.gatewayExists(key) {
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound), fmt.Sprintf("Gateway %s not found", key)
			}
			return nil, "", false
		}
		where = "Gateway " + key.String()
		for _, l := range gw.listeners {
			// The whole Gateway: its own listeners and its ListenerSets'; a section: one of
			// its own.
			if target.section == "" || l.set == nil && string(l.spec.Name) == target.section {
				own = append(own, l)
			}
		}
		if target.section != "" {
			level = levelGatewayListener
		}
	default:
		set := t.setByName[key]
		if set == nil {
			if !slices.ContainsFunc(t.in.ListenerSets, func(s *gwv1.ListenerSet) bool { return s.Namespace == key.ns && s.Name == key.name }) {
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound), fmt.Sprintf("ListenerSet %s not found", key)
			}
			return nil, "", false
		}
		where = "ListenerSet " + key.String()
		level = levelSet
		for _, l := range set.listeners {
			if target.section == "" || string(l.spec.Name) == target.section {
				own = append(own, l)
			}
		}
		if target.section != "" {
			level = levelSetListener
		}
	}
	if target.section != "" {
		where += " listener " + target.section
		if len(own) == 0 {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound),
				fmt.Sprintf("%s has no listener %s", where[:len(where)-len(" listener "+target.section)], target.section)
			return nil, "", false
		}
	}
	var checked []*listener
	plain := 0
	for _, l := range own {
		if l.spec.Protocol == gwv1.HTTPProtocolType {
			plain++
			continue
		}
		checked = append(checked, l)
	}
	if len(checked) == 0 && len(own) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonInvalid),
			"plain HTTP listeners are not checked (they redirect to https and answer ACME HTTP-01 challenges, which come from anywhere): target a TLS, HTTPS or TCP listener"
		return nil, "", false
	}
	switch {
	case plain == 1:
		c.Message = " (not on its plain HTTP listener, which redirects to https and answers ACME HTTP-01 challenges)"
	case plain > 1:
		c.Message = fmt.Sprintf(" (not on its %d plain HTTP listeners, which redirect to https and answer ACME HTTP-01 challenges)", plain)
	}
	return func(p *access.Policy) {
		for _, l := range checked {
			l.access[level] = p
		}
	}, where, true
}

// describeTarget is a target for people: "TLSRoute ns/db", "Gateway ns/gw listener tls".
func describeTarget(k accessTarget) string {
	s := k.kind + " " + k.ns + "/" + k.name
	if k.section != "" {
		s += " listener " + k.section
	}
	return s
}

// accessSpec is an AccessPolicy's body in the data plane's terms. The ranges were validated
// before translate (the CRD, or the files' check); one that does not parse is left out.
func accessSpec(a *v1alpha1.Access) access.Spec {
	s := access.Spec{Allow: parsePrefixes(a.SourceRanges), Deny: parsePrefixes(a.DeniedRanges)}
	if a.MaxConnections != nil {
		s.MaxConnections = *a.MaxConnections
	}
	if c := a.PerClient; c != nil {
		if c.MaxConnections != nil {
			s.PerClient.MaxConnections = *c.MaxConnections
		}
		if c.ConnectionsPerMinute != nil {
			s.PerClient.PerMinute = *c.ConnectionsPerMinute
		}
		if c.Burst != nil {
			s.PerClient.Burst = *c.Burst
		}
		if c.IPv6PrefixLength != nil {
			s.PerClient.IPv6PrefixLength = int(*c.IPv6PrefixLength)
		}
	}
	return s
}

func parsePrefixes(ss []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// listenerAccess is the listener's policies in the order they are checked.
func (l *listener) listenerAccess() []*access.Policy {
	var out []*access.Policy
	for _, p := range l.access {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// routeAccess lists, for each TLSRoute and TCPRoute that serves on a listener with
// policies or has one of its own, every policy on its paths (each once, listener levels
// first), sorted by kind, namespace and name.
func (t *translator) routeAccess() []RouteAccess {
	if len(t.in.AccessPolicies) == 0 {
		return nil
	}
	byRoute := map[*route]*RouteAccess{}
	var order []*route
	add := func(r *route, ps []*access.Policy) {
		ra := byRoute[r]
		if ra == nil {
			ra = &RouteAccess{Kind: r.kind, Namespace: r.meta.Namespace, Name: r.meta.Name}
			byRoute[r] = ra
			order = append(order, r)
		}
		for _, p := range ps {
			in := v1alpha1.AccessInForce{Policy: p.Name, Target: p.Target, Rules: p.String()}
			if !slices.Contains(ra.Access, in) {
				ra.Access = append(ra.Access, in)
			}
		}
	}
	for _, gw := range t.gateways {
		for _, l := range gw.listeners {
			if l.routeKind != kindTLSRoute && l.routeKind != kindTCPRoute {
				continue
			}
			lp := l.listenerAccess()
			for _, a := range l.attached {
				if len(lp) > 0 || len(a.route.snap.Access) > 0 {
					add(a.route, lp)
					add(a.route, a.route.snap.Access)
				}
			}
		}
	}
	out := make([]RouteAccess, 0, len(order))
	for _, r := range order {
		out = append(out, *byRoute[r])
	}
	slices.SortFunc(out, func(a, b RouteAccess) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}
