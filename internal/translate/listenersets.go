package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ---- ListenerSets ----
//
// A ListenerSet adds listeners to a Gateway that allows it (spec.allowedListeners; none by
// default). Its listeners are the Gateway's as far as ports, addresses, conflicts and the
// snapshot go: they are appended to gateway.listeners after the Gateway's own, the sets in
// the spec's precedence (oldest first, then namespace/name). Routes reach them only through a
// parentRef of kind ListenerSet; a parentRef to the Gateway selects its own listeners alone.
//
// A listener that conflicts with one earlier in that order (the Gateway's own, an older
// set's, one before it in its own set) is Conflicted and serves nothing, and the earlier one
// keeps serving: a new tenant's set can never take a port or hostname from one already there.
// Statuses name only the conflicting listener's port, hostname and name, never another set's
// routes or Secrets. A Gateway's MaxListenersAnnotation caps its own and its sets' listeners
// together: a set that would go beyond it is refused whole, in the same precedence.

type listenerSet struct {
	obj       *gwv1.ListenerSet
	key       nsName
	gw        *gateway
	listeners []*listener
	// rejectReason is set when the set as a whole is not accepted (NotAllowed,
	// ParentNotAccepted); its listeners are then not part of the Gateway.
	rejectReason gwv1.ListenerSetConditionReason
	rejectMsg    string
}

func (s *listenerSet) rejected() bool { return s.rejectReason != "" }

// buildListenerSets attaches every ListenerSet whose parent is one of our Gateways.
func (t *translator) buildListenerSets() {
	sets := slices.Clone(t.in.ListenerSets)
	slices.SortFunc(sets, func(a, b *gwv1.ListenerSet) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	// Per Gateway and port, the listeners that serve so far: a platform with a thousand
	// tenants' sets compares each new listener with those of its port only.
	serving := map[*gateway]servingPorts{}
	// Per Gateway, its listeners so far (its own and the accepted sets'), for
	// MaxListenersAnnotation.
	merged := map[*gateway]int{}
	for _, o := range sets {
		key, ok := parentOf(o)
		gw := t.gwByName[key]
		if !ok || gw == nil {
			continue // another kind of parent, or not one of our Gateways: not ours to report
		}
		byPort := serving[gw]
		if byPort == nil {
			byPort = servingPorts{}
			for _, l := range gw.listeners {
				if l.routeKind != "" && l.conflict == "" {
					byPort.add(l)
				}
			}
			serving[gw] = byPort
			merged[gw] = len(gw.listeners)
		}
		s := &listenerSet{obj: o, key: nsName{o.Namespace, o.Name}, gw: gw}
		t.sets = append(t.sets, s)
		t.setByName[s.key] = s
		if ok, why := t.allowsListenerSet(gw, o.Namespace); !ok {
			s.rejectReason, s.rejectMsg = gwv1.ListenerSetReasonNotAllowed, why
		} else if gw.rejected() {
			s.rejectReason = gwv1.ListenerSetReasonParentNotAccepted
			s.rejectMsg = fmt.Sprintf("Gateway %s is not accepted", gw.key)
		} else if n, limit := len(o.Spec.Listeners), gw.maxListeners; limit > 0 && merged[gw]+n > limit {
			s.rejectReason = gwv1.ListenerSetReasonNotAllowed
			s.rejectMsg = fmt.Sprintf("Gateway %s takes at most %d listeners (annotation %s): it has %d already "+
				"(its own and older ListenerSets'), room for %d more, and this ListenerSet has %d", gw.key, limit, MaxListenersAnnotation,
				merged[gw], max(0, limit-merged[gw]), n)
		} else {
			merged[gw] += n
		}
		plaintext := plaintextListeners(o.Annotations)
		for i := range o.Spec.Listeners {
			e := &o.Spec.Listeners[i]
			spec := &gwv1.Listener{Name: e.Name, Hostname: e.Hostname, Port: e.Port, Protocol: e.Protocol,
				TLS: e.TLS, AllowedRoutes: e.AllowedRoutes}
			l := t.listener(gw, s, spec)
			l.redirectsOnly = plaintext[string(e.Name)] && e.Protocol == gwv1.HTTPProtocolType
			s.listeners = append(s.listeners, l)
		}
		if s.rejected() {
			for _, l := range s.listeners {
				if l.accepted() {
					l.rejectReason, l.rejectMsg = gwv1.ListenerConditionReason(s.rejectReason), s.rejectMsg
				}
			}
			continue
		}
		// Precedence decides every conflict of a set's listener, with one of the Gateway's,
		// of an older set's or one earlier in its own list: the earlier one wins.
		for _, l := range s.listeners {
			if l.routeKind != "" {
				if earlier := byPort.firstConflict(l); earlier != nil {
					if reason, msg := conflictBetween(earlier, l); reason != "" {
						l.setConflict(reason, msg)
					}
				}
				if l.conflict == "" {
					byPort.add(l)
				}
			}
			l.index = len(gw.listeners)
			gw.listeners = append(gw.listeners, l)
		}
	}
}

// allowsListenerSet reports whether gw's spec.allowedListeners admits ListenerSets from
// namespace ns, and if not, why.
func (t *translator) allowsListenerSet(gw *gateway, ns string) (bool, string) {
	return AllowsListenerSet(gw.obj, ns, t.namespaceLabels(ns))
}

// AllowsListenerSet reports whether Gateway gw's spec.allowedListeners admits ListenerSets
// from namespace ns (whose labels are nsLabels), and if not, why: None (the default), Same,
// All or a namespace Selector. Provisioning asks it too, to count only the ports of the
// sets the Gateway takes.
func AllowsListenerSet(gw *gwv1.Gateway, ns string, nsLabels labels.Set) (bool, string) {
	from := gwv1.NamespacesFromNone
	var sel *metav1.LabelSelector
	if al := gw.Spec.AllowedListeners; al != nil && al.Namespaces != nil {
		if al.Namespaces.From != nil {
			from = *al.Namespaces.From
		}
		sel = al.Namespaces.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true, ""
	case gwv1.NamespacesFromSame:
		if ns == gw.Namespace {
			return true, ""
		}
	case gwv1.NamespacesFromSelector:
		if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && sel != nil && s.Matches(nsLabels) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("Gateway %s/%s does not allow ListenerSets from namespace %s (spec.allowedListeners.namespaces.from: %s)", gw.Namespace, gw.Name, ns, from)
}

// IsParent reports whether ListenerSet s names Gateway gw as its parent.
func IsParent(s *gwv1.ListenerSet, gw *gwv1.Gateway) bool {
	key, ok := parentOf(s)
	return ok && key == nsName{gw.Namespace, gw.Name}
}

// parentOf is the Gateway s names as its parent; false for another kind of parent.
func parentOf(s *gwv1.ListenerSet) (nsName, bool) {
	ref := s.Spec.ParentRef
	if (ref.Group != nil && *ref.Group != groupGateway) || (ref.Kind != nil && *ref.Kind != kindGateway) {
		return nsName{}, false
	}
	ns := s.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return nsName{ns, string(ref.Name)}, true
}

// servingPorts are a Gateway's serving listeners by port, in precedence order.
type servingPorts map[gwv1.PortNumber]*portListeners

// portListeners are the serving listeners of one port in precedence order, indexed so that
// a new listener finds the first one it conflicts with without being compared with each:
// a platform Gateway with a thousand tenants' sets has a thousand listeners on one
// database port, and comparing every new one with all before it cost a translation
// 20 ms.
type portListeners struct {
	all                             []*listener
	firstTCP, firstHTTP, firstOther int // indexes in all, -1 for none
	byHost                          map[string]int
}

func (s servingPorts) add(l *listener) {
	p := s[l.spec.Port]
	if p == nil {
		p = &portListeners{firstTCP: -1, firstHTTP: -1, firstOther: -1, byHost: map[string]int{}}
		s[l.spec.Port] = p
	}
	i := len(p.all)
	p.all = append(p.all, l)
	first := func(f *int) {
		if *f < 0 {
			*f = i
		}
	}
	if l.routeKind == kindTCPRoute {
		first(&p.firstTCP)
	}
	if l.spec.Protocol == gwv1.HTTPProtocolType {
		first(&p.firstHTTP)
	} else {
		first(&p.firstOther)
	}
	if _, ok := p.byHost[l.hostname]; !ok {
		p.byHost[l.hostname] = i
	}
}

// firstConflict is the first serving listener of l's port that conflictBetween says l
// conflicts with, or nil: any one when l is a TCP listener; else the first TCP listener,
// the first of the other protocol class (HTTP or not) and the first of l's hostname,
// whichever comes first.
func (s servingPorts) firstConflict(l *listener) *listener {
	p := s[l.spec.Port]
	if p == nil || len(p.all) == 0 {
		return nil
	}
	if l.routeKind == kindTCPRoute {
		return p.all[0]
	}
	best := -1
	consider := func(i int) {
		if i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	consider(p.firstTCP)
	if l.spec.Protocol == gwv1.HTTPProtocolType {
		consider(p.firstOther)
	} else {
		consider(p.firstHTTP)
	}
	if i, ok := p.byHost[l.hostname]; ok {
		consider(i)
	}
	if best < 0 {
		return nil
	}
	return p.all[best]
}

// conflictBetween is why listener b conflicts with a, on the rules markConflicts applies
// within one Gateway: one port, and a TCP listener, HTTP beside TLS or HTTPS, or the same
// hostname. The message names only b's own port and hostname and a's listener name.
func conflictBetween(a, b *listener) (gwv1.ListenerConditionReason, string) {
	if a.spec.Port != b.spec.Port {
		return "", ""
	}
	owner := "the Gateway"
	switch {
	case a.set == b.set:
		owner = "this ListenerSet"
	case a.set != nil:
		owner = "an older ListenerSet"
	}
	switch {
	case a.routeKind == kindTCPRoute || b.routeKind == kindTCPRoute:
		return gwv1.ListenerReasonProtocolConflict, fmt.Sprintf("port %d is taken by %s's listener %s, and a TCP listener takes a whole port", b.spec.Port, owner, a.spec.Name)
	case (a.spec.Protocol == gwv1.HTTPProtocolType) != (b.spec.Protocol == gwv1.HTTPProtocolType):
		return gwv1.ListenerReasonProtocolConflict, fmt.Sprintf("port %d is taken by %s's listener %s of protocol %s: an HTTP listener cannot share a port with TLS or HTTPS listeners", b.spec.Port, owner, a.spec.Name, a.spec.Protocol)
	case a.hostname == b.hostname:
		return gwv1.ListenerReasonHostnameConflict, fmt.Sprintf("port %d and hostname %s are taken by %s's listener %s", b.spec.Port, cmp.Or(b.hostname, "(any)"), owner, a.spec.Name)
	}
	return "", ""
}

// listenerSetStatus is a ListenerSet's status: its conditions and one entry per listener.
func (t *translator) listenerSetStatus(s *listenerSet) gwv1.ListenerSetStatus {
	var st gwv1.ListenerSetStatus
	var invalid []string
	valid := 0
	for _, l := range s.listeners {
		ls := t.listenerStatus(l)
		st.Listeners = append(st.Listeners, gwv1.ListenerEntryStatus{Name: ls.Name, SupportedKinds: ls.SupportedKinds,
			AttachedRoutes: ls.AttachedRoutes, Conditions: ls.Conditions})
		if !s.rejected() && l.accepted() && l.programmed() {
			valid++
		} else {
			invalid = append(invalid, string(l.spec.Name))
		}
	}
	conds := conditions{gen: s.obj.Generation, now: t.now}
	accepted, programmed := string(gwv1.ListenerSetConditionAccepted), string(gwv1.ListenerSetConditionProgrammed)
	switch {
	case s.rejected():
		conds.set(accepted, false, string(s.rejectReason), s.rejectMsg)
		conds.set(programmed, false, string(s.rejectReason), s.rejectMsg)
	case valid == 0:
		msg := "no listener is valid: " + strings.Join(invalid, ", ")
		conds.set(accepted, false, string(gwv1.ListenerSetReasonListenersNotValid), msg)
		conds.set(programmed, false, string(gwv1.ListenerSetReasonListenersNotValid), msg)
	case len(invalid) > 0:
		conds.set(accepted, true, string(gwv1.ListenerSetReasonListenersNotValid),
			"ListenerSet is accepted, but these listeners are not valid and serve nothing: "+strings.Join(invalid, ", "))
		conds.set(programmed, true, string(gwv1.ListenerSetReasonProgrammed),
			fmt.Sprintf("%d of %d listeners are programmed on Gateway %s", valid, len(s.listeners), s.gw.key))
	default:
		conds.set(accepted, true, string(gwv1.ListenerSetReasonAccepted), "ListenerSet is accepted")
		conds.set(programmed, true, string(gwv1.ListenerSetReasonProgrammed),
			fmt.Sprintf("%d of %d listeners are programmed on Gateway %s", valid, len(s.listeners), s.gw.key))
	}
	st.Conditions = conds.list
	return st
}

// attachedListenerSets counts gw's ListenerSets that are accepted: the Gateway's
// status.attachedListenerSets.
func (t *translator) attachedListenerSets(gw *gateway) int32 {
	n := int32(0)
	for _, s := range t.sets {
		if s.gw == gw && !s.rejected() && slices.ContainsFunc(s.listeners, func(l *listener) bool { return l.accepted() && l.programmed() }) {
			n++
		}
	}
	return n
}
