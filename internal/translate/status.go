package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Status is the Gateway API status of every object translate is responsible for, in a
// deterministic order (sorted by namespace, then name). Objects that belong to other
// controllers, and routes with no parentRef to one of our Gateways, are absent: their status
// is not ours to write.
type Status struct {
	GatewayClasses []GatewayClassStatus `json:"gatewayClasses,omitempty"`
	Gateways       []GatewayStatus      `json:"gateways,omitempty"`
	ListenerSets   []ListenerSetStatus  `json:"listenerSets,omitempty"`
	TLSRoutes      []TLSRouteStatus     `json:"tlsRoutes,omitempty"`
	TCPRoutes      []TCPRouteStatus     `json:"tcpRoutes,omitempty"`
	HTTPRoutes     []HTTPRouteStatus    `json:"httpRoutes,omitempty"`
	// BackendPolicies and ListenerPolicies: every one in the input (snigate's own kinds).
	BackendPolicies  []BackendPolicyStatus  `json:"backendPolicies,omitempty"`
	ListenerPolicies []ListenerPolicyStatus `json:"listenerPolicies,omitempty"`
	AccessPolicies   []AccessPolicyStatus   `json:"accessPolicies,omitempty"`
	// RouteAccess lists, per TLSRoute and TCPRoute with AccessPolicies on its path, those
	// policies (sorted by kind, namespace and name; see Access).
	RouteAccess []RouteAccess `json:"routeAccess,omitempty"`
}

// PolicyKind is the status of every policy of one kind.
type PolicyKind struct {
	Kind string // "BackendPolicy"
	List []ObjectStatus[gwv1.PolicyStatus]
}

// Policies lists the status of every policy kind: what the status writer, `snigate check`
// and the status page go through, so that a new policy kind is one entry here.
func (s *Status) Policies() []PolicyKind {
	return []PolicyKind{{"BackendPolicy", s.BackendPolicies}, {"ListenerPolicy", s.ListenerPolicies}, {"AccessPolicy", s.AccessPolicies}}
}

// ObjectStatus is the status of one object.
type ObjectStatus[T any] struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Status    T      `json:"status"`
}

// GatewayClassStatus is the status of a GatewayClass (cluster-scoped: no namespace).
type GatewayClassStatus = ObjectStatus[gwv1.GatewayClassStatus]

// GatewayStatus is the status of a Gateway.
type GatewayStatus = ObjectStatus[gwv1.GatewayStatus]

// ListenerSetStatus is the status of a ListenerSet whose parent is one of our Gateways.
type ListenerSetStatus = ObjectStatus[gwv1.ListenerSetStatus]

// ListenerSet returns the status of a ListenerSet, or nil.
func (s *Status) ListenerSet(namespace, name string) *gwv1.ListenerSetStatus {
	return find(s.ListenerSets, namespace, name)
}

// TLSRouteStatus is the status of a TLSRoute: one entry per parentRef to one of our Gateways.
type TLSRouteStatus = ObjectStatus[gwv1.TLSRouteStatus]

// TCPRouteStatus is the status of a TCPRoute.
type TCPRouteStatus = ObjectStatus[gwv1.TCPRouteStatus]

// HTTPRouteStatus is the status of an HTTPRoute.
type HTTPRouteStatus = ObjectStatus[gwv1.HTTPRouteStatus]

// HTTPRoute returns the status of an HTTPRoute, or nil.
func (s *Status) HTTPRoute(namespace, name string) *gwv1.HTTPRouteStatus {
	return find(s.HTTPRoutes, namespace, name)
}

// Gateway returns the status of a Gateway, or nil.
func (s *Status) Gateway(namespace, name string) *gwv1.GatewayStatus {
	return find(s.Gateways, namespace, name)
}

// TLSRoute returns the status of a TLSRoute, or nil.
func (s *Status) TLSRoute(namespace, name string) *gwv1.TLSRouteStatus {
	return find(s.TLSRoutes, namespace, name)
}

// TCPRoute returns the status of a TCPRoute, or nil.
func (s *Status) TCPRoute(namespace, name string) *gwv1.TCPRouteStatus {
	return find(s.TCPRoutes, namespace, name)
}

// GatewayClass returns the status of a GatewayClass, or nil.
func (s *Status) GatewayClass(name string) *gwv1.GatewayClassStatus {
	return find(s.GatewayClasses, "", name)
}

// find looks an object up by binary search: Translate leaves every list sorted by namespace,
// then name (a linear scan made `snigate check` quadratic: 90 s for 100 000 routes).
func find[T any](list []ObjectStatus[T], namespace, name string) *T {
	i, ok := slices.BinarySearchFunc(list, [2]string{namespace, name}, func(o ObjectStatus[T], k [2]string) int {
		return cmp.Or(cmp.Compare(o.Namespace, k[0]), cmp.Compare(o.Name, k[1]))
	})
	if !ok {
		return nil
	}
	return &list[i].Status
}

func sortStatus[T any](list []ObjectStatus[T]) {
	slices.SortFunc(list, compareStatus[T])
}

func compareStatus[T any](a, b ObjectStatus[T]) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// conditions builds a condition list for one object generation at one time.
type conditions struct {
	gen  int64
	now  metav1.Time
	list []metav1.Condition
}

func (c *conditions) set(typ string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	c.list = append(c.list, metav1.Condition{
		Type:               typ,
		Status:             st,
		ObservedGeneration: c.gen,
		LastTransitionTime: c.now,
		Reason:             reason,
		Message:            msg,
	})
}

// status is the status of our GatewayClasses, our Gateways and the routes with a parentRef
// to one of them, each list sorted by namespace and name.
func (t *translator) status() *Status {
	s := &Status{GatewayClasses: t.classStats}
	for _, gw := range t.gateways {
		s.Gateways = append(s.Gateways, GatewayStatus{Namespace: gw.key.ns, Name: gw.key.name, Status: t.gatewayStatus(gw)})
	}
	for _, ls := range t.sets {
		s.ListenerSets = append(s.ListenerSets, ListenerSetStatus{Namespace: ls.key.ns, Name: ls.key.name, Status: t.listenerSetStatus(ls)})
	}
	s.BackendPolicies, s.ListenerPolicies, s.AccessPolicies = t.backendPolicyStats, t.listenerPolicyStats, t.accessPolicyStats
	s.RouteAccess = t.routeAccess()
	sortStatus(s.GatewayClasses)
	sortStatus(s.Gateways)
	sortStatus(s.ListenerSets)
	sortStatus(s.BackendPolicies)
	sortStatus(s.ListenerPolicies)
	sortStatus(s.AccessPolicies)
	// With the memo, the routes' status lists are the previous call's without the routes
	// that are gone and with the new ones: an unchanged route's status is the same, and a
	// one-route change among 100 000 routes, which must apply within 50 ms
	// (docs/performance.md, route scale), has no time to sort them all again.
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
	// Sized at once: with tens of thousands of routes, growing these lists copied them many
	// times over.
	var nTLS, nTCP, nHTTP int
	for _, r := range routes {
		if len(r.parents) > 0 {
			switch r.kind {
			case kindTLSRoute:
				nTLS++
			case kindTCPRoute:
				nTCP++
			case kindHTTPRoute:
				nHTTP++
			}
		}
	}
	tls, tcp, http := sized[TLSRouteStatus](nTLS), sized[TCPRouteStatus](nTCP), sized[HTTPRouteStatus](nHTTP)
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
		if l.set != nil {
			continue // a ListenerSet's: in its own status
		}
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
	var svc nsName
	switch {
	case t.opts.ProvisionedAddresses:
		// Clients reach a provisioned Gateway through its LoadBalancer Service, not at the
		// addresses its data plane binds, whether or not a listener is programmed.
		st.Addresses, svc = t.provisionedAddresses(gw)
	case programmed > 0:
		for _, a := range gw.addrs {
			st.Addresses = append(st.Addresses, gwv1.GatewayStatusAddress{Type: ptr(gwv1.IPAddressType), Value: a.String()})
		}
	}
	switch {
	case len(gw.unusable) > 0:
		conds.set(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotUsable), strings.Join(gw.unusable, "; "))
	case programmed == 0:
		conds.set(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "no listener is programmed")
	case t.opts.ProvisionedAddresses && len(st.Addresses) == 0:
		// No client can reach the Gateway yet: the Gateway API's AddressNotAssigned.
		conds.set(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotAssigned),
			addressNotAssigned(svc))
	default:
		conds.set(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed),
			fmt.Sprintf("%d of %d listeners are programmed", programmed, len(st.Listeners)))
	}
	st.Conditions = conds.list
	if len(t.sets) > 0 || gw.obj.Spec.AllowedListeners != nil {
		st.AttachedListenerSets = ptr(t.attachedListenerSets(gw))
	}
	return st
}

func (t *translator) listenerStatus(l *listener) gwv1.ListenerStatus {
	conds := conditions{gen: l.generation(), now: t.now}
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
		reason := gwv1.ListenerReasonInvalid
		if l.conflict != "" {
			reason, why = l.conflict, "it is conflicted"
		}
		conds.set(string(gwv1.ListenerConditionProgrammed), false, string(reason), "Listener is not programmed: "+why)
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

// sized is an empty list with room for n elements, nil when n is 0 (as a list never
// appended to is).
func sized[T any](n int) []T {
	if n == 0 {
		return nil
	}
	return make([]T, 0, n)
}
