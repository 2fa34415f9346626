package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/snapshot"
)

// BackendPolicyStatus is the status of a BackendPolicy.
type BackendPolicyStatus = ObjectStatus[gwv1.PolicyStatus]

// ListenerPolicyStatus is the status of a ListenerPolicy.
type ListenerPolicyStatus = ObjectStatus[gwv1.PolicyStatus]

// BackendPolicy returns the status of a BackendPolicy, or nil.
func (s *Status) BackendPolicy(namespace, name string) *gwv1.PolicyStatus {
	return find(s.BackendPolicies, namespace, name)
}

// ListenerPolicy returns the status of a ListenerPolicy, or nil.
func (s *Status) ListenerPolicy(namespace, name string) *gwv1.PolicyStatus {
	return find(s.ListenerPolicies, namespace, name)
}

// Policies (direct policy attachment, GEP-713). A BackendPolicy's ancestors are the
// Services it targets: what it sets (the PROXY header written to their backends) holds for
// every connection snigate makes to them, whichever Gateway the route came through, so a
// Service is where it takes effect or not. A ListenerPolicy's ancestors are the Gateways it
// targets, with the sectionName it gave.
//
// Conflicts go by the Gateway API's precedence: of two policies on one target, the older
// (creationTimestamp, then namespace/name) applies and the other is Conflicted there. A
// ListenerPolicy's setting belongs to the bound port (the header precedes the ClientHello,
// before any listener is chosen), so two policies on different listeners of one port
// conflict unless they ask the same.

// backendPolicies resolves which BackendPolicy sets each Service's backend header
// (t.proxyOut) and the status of every BackendPolicy.
func (t *translator) backendPolicies() {
	pols := slices.Clone(t.in.BackendPolicies)
	slices.SortFunc(pols, func(a, b *v1alpha1.BackendPolicy) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	owner := map[nsName]*v1alpha1.BackendPolicy{}
	for _, p := range pols {
		var ancestors []gwv1.PolicyAncestorStatus
		for _, ref := range p.Spec.TargetRefs {
			svc := nsName{p.Namespace, string(ref.Name)}
			ar := gwv1.ParentReference{Group: ptr(gwv1.Group("")), Kind: ptr(gwv1.Kind(kindService)),
				Namespace: ptr(gwv1.Namespace(p.Namespace)), Name: ref.Name}
			c := t.policyCondition(&p.ObjectMeta)
			switch prev := owner[svc]; {
			case t.services[svc] == nil:
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound), fmt.Sprintf("Service %s not found", svc)
			case prev != nil && prev != p:
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonConflicted),
					fmt.Sprintf("BackendPolicy %s/%s, older, targets Service %s too and applies to it", prev.Namespace, prev.Name, svc)
			default:
				owner[svc] = p
				h := proxyHeader(p.Spec.ProxyProtocol)
				if h != nil {
					t.proxyOut[svc] = h
					c.Message = fmt.Sprintf("every connection to the backends of Service %s begins with a PROXY %s header", svc, h)
				} else {
					c.Message = fmt.Sprintf("applies to Service %s (it sets nothing)", svc)
				}
			}
			ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
		}
		t.backendPolicyStats = append(t.backendPolicyStats, BackendPolicyStatus{Namespace: p.Namespace, Name: p.Name,
			Status: gwv1.PolicyStatus{Ancestors: ancestors}})
	}
}

func proxyHeader(pp *v1alpha1.BackendProxyProtocol) *snapshot.ProxyHeader {
	if pp == nil {
		return nil
	}
	h := &snapshot.ProxyHeader{Version: 1}
	if pp.Version == v1alpha1.ProxyProtocolV2 {
		h.Version = 2
		h.Authority = slices.Contains(pp.TLVs, v1alpha1.TLVAuthority)
		h.ALPN = slices.Contains(pp.TLVs, v1alpha1.TLVALPN)
	}
	return h
}

// listenerPolicies resolves the inbound PROXY setting of every bound port (t.proxyIn, by
// the address snapshot() binds) and the status of every ListenerPolicy. It runs after the
// Gateways' listeners and ports are known (claimPorts).
func (t *translator) listenerPolicies() {
	pols := slices.Clone(t.in.ListenerPolicies)
	slices.SortFunc(pols, func(a, b *v1alpha1.ListenerPolicy) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	type claim struct {
		pol *v1alpha1.ListenerPolicy
		in  *snapshot.InboundProxy
	}
	ports := map[string]claim{}
	for _, p := range pols {
		in := inboundProxy(p.Spec.ProxyProtocol)
		var ancestors []gwv1.PolicyAncestorStatus
		for _, ref := range p.Spec.TargetRefs {
			key := nsName{p.Namespace, string(ref.Name)}
			ar := gwv1.ParentReference{Group: ptr(gwv1.Group(gwv1.GroupName)), Kind: ptr(gwv1.Kind(kindGateway)),
				Namespace: ptr(gwv1.Namespace(p.Namespace)), Name: ref.Name, SectionName: ref.SectionName}
			gw := t.gwByName[key]
			if gw == nil {
				if !t.gatewayExists(key) {
					c := t.policyCondition(&p.ObjectMeta)
					c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound), fmt.Sprintf("Gateway %s not found", key)
					ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
				}
				continue // another controller's Gateway: not ours to say anything about
			}
			var targets []*listener
			named, plainHTTP := 0, 0
			for _, l := range gw.listeners {
				if l.set != nil || ref.SectionName != nil && string(l.spec.Name) != string(*ref.SectionName) {
					continue
				}
				named++
				if l.spec.Protocol == gwv1.HTTPProtocolType {
					// Plain HTTP is served by net/http from the first byte: a header before
					// the request is not read there (HTTPS and TLS, TCP listeners take it).
					plainHTTP++
					continue
				}
				targets = append(targets, l)
			}
			c := t.policyCondition(&p.ObjectMeta)
			switch {
			case named == 0:
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound),
					fmt.Sprintf("Gateway %s has no listener %s", key, *ref.SectionName)
			case len(targets) == 0:
				c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(gwv1.PolicyReasonInvalid),
					"PROXY headers are read on TLS, HTTPS and TCP listeners; plain HTTP listeners do not take them"
			}
			if c.Status == metav1.ConditionFalse {
				ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
				continue
			}
			var conflicts []string
			var mine []string
			for _, l := range targets {
				for _, ap := range t.bindAddrs(gw, l) {
					prev, ok := ports[ap]
					switch {
					case !ok:
						ports[ap] = claim{p, in}
						mine = append(mine, ap)
					case prev.pol == p || sameInbound(prev.in, in):
						mine = append(mine, ap)
					default:
						conflicts = append(conflicts, fmt.Sprintf("%s (ListenerPolicy %s/%s, older, asks otherwise)", ap, prev.pol.Namespace, prev.pol.Name))
					}
				}
			}
			switch {
			case len(conflicts) > 0:
				c.Status, c.Reason = metav1.ConditionFalse, string(gwv1.PolicyReasonConflicted)
				c.Message = "the header precedes the ClientHello, so its setting is the bound port's, and another policy has the port: " + strings.Join(conflicts, ", ")
			case in == nil:
				c.Message = "applies (it sets nothing)"
			default:
				c.Message = fmt.Sprintf("a PROXY header is read first on %s from %s", strings.Join(mine, ", "), rangesString(in))
				if in.Required {
					c.Message += "; connections from there without one are closed"
				}
				if plainHTTP > 0 {
					c.Message += fmt.Sprintf(" (not on the Gateway's %d plain HTTP listeners)", plainHTTP)
				}
			}
			ancestors = appendAncestor(ancestors, ar, t.opts.ControllerName, c)
		}
		t.listenerPolicyStats = append(t.listenerPolicyStats, ListenerPolicyStatus{Namespace: p.Namespace, Name: p.Name,
			Status: gwv1.PolicyStatus{Ancestors: ancestors}})
	}
	for ap, c := range ports {
		if c.in != nil {
			t.proxyIn[ap] = c.in
		}
	}
}

func inboundProxy(pp *v1alpha1.ListenerProxyProtocol) *snapshot.InboundProxy {
	if pp == nil {
		return nil
	}
	in := &snapshot.InboundProxy{Required: pp.Required}
	for _, r := range pp.TrustedRanges {
		if p, err := netip.ParsePrefix(r); err == nil { // validated before translate
			in.Trusted = append(in.Trusted, p.Masked())
		}
	}
	return in
}

func sameInbound(a, b *snapshot.InboundProxy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Required == b.Required && slices.Equal(a.Trusted, b.Trusted)
}

func rangesString(in *snapshot.InboundProxy) string {
	s := make([]string, len(in.Trusted))
	for i, r := range in.Trusted {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// bindAddrs are the addresses ("ip:port") snapshot() binds for listener l of gw.
func (t *translator) bindAddrs(gw *gateway, l *listener) []string {
	bind := l.spec.Port
	if b, ok := t.opts.BindPorts[bind]; ok {
		bind = b
	}
	out := make([]string, len(gw.addrs))
	for i, addr := range gw.addrs {
		out[i] = netip.AddrPortFrom(addr, uint16(bind)).String()
	}
	return out
}

// gatewayExists reports whether the input has the Gateway at all (of any class).
func (t *translator) gatewayExists(key nsName) bool {
	for _, g := range t.in.Gateways {
		if g.Namespace == key.ns && g.Name == key.name {
			return true
		}
	}
	return false
}

func (t *translator) policyCondition(meta *metav1.ObjectMeta) metav1.Condition {
	return metav1.Condition{Type: string(gwv1.PolicyConditionAccepted), Status: metav1.ConditionTrue, Reason: string(gwv1.PolicyReasonAccepted),
		ObservedGeneration: meta.Generation, LastTransitionTime: t.now}
}

// appendAncestor adds c to the ancestor ar, one entry per ancestor: a policy naming a
// target twice (a Gateway and one of its listeners) keeps the worst condition.
func appendAncestor(list []gwv1.PolicyAncestorStatus, ar gwv1.ParentReference, controller string, c metav1.Condition) []gwv1.PolicyAncestorStatus {
	for i := range list {
		if equalParentRef(list[i].AncestorRef, ar) {
			if c.Status == metav1.ConditionFalse {
				list[i].Conditions = []metav1.Condition{c}
			}
			return list
		}
	}
	return append(list, gwv1.PolicyAncestorStatus{AncestorRef: ar, ControllerName: gwv1.GatewayController(controller), Conditions: []metav1.Condition{c}})
}

func equalParentRef(a, b gwv1.ParentReference) bool {
	str := func(p *gwv1.SectionName) string {
		if p == nil {
			return ""
		}
		return string(*p)
	}
	return *a.Kind == *b.Kind && *a.Namespace == *b.Namespace && a.Name == b.Name && str(a.SectionName) == str(b.SectionName)
}
