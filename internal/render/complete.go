package render

// Complete: what translate decided about what was rendered, put into the result's status
// (the runner calls it after translate, on every render).

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/conditions"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/translate"
)

// Complete fills in what translate decided about each rendered Gateway: every listener's
// attached routes and readiness, the addresses, and the Ready condition (True when the
// Gateway and every listener are programmed and nothing holds a listener back).
func Complete(out *Result, st *translate.Status, now func() metav1.Time) {
	if now == nil {
		now = metav1.Now
	}
	completeExposures(out, st, now)
	for i := range out.Tenants {
		tn := &out.Tenants[i]
		if (tn.gw == nil && tn.set == nil) || st == nil || meta.IsStatusConditionFalse(tn.Status.Conditions, v1alpha1.ConditionAccepted) {
			continue
		}
		var gs *gwv1.GatewayStatus
		if tn.gw != nil {
			gs = st.Gateway(tn.gw.Namespace, tn.gw.Name)
		} else {
			gs = setAsGateway(st, tn.set)
		}
		if gs == nil {
			continue
		}
		tn.Status.Addresses = gs.Addresses
		byName := map[string]*gwv1.ListenerStatus{}
		for j := range gs.Listeners {
			byName[string(gs.Listeners[j].Name)] = &gs.Listeners[j]
		}
		var notReady []string
		for j := range tn.Status.Listeners {
			ls := &tn.Status.Listeners[j]
			gl := byName[ls.Name]
			if gl != nil {
				ls.AttachedRoutes = gl.AttachedRoutes
			}
			programmed := gl != nil && meta.IsStatusConditionTrue(gl.Conditions, string(gwv1.ListenerConditionProgrammed))
			ls.Ready = programmed && tn.held[ls.Name] == ""
			if ls.Reason == "" && !programmed {
				ls.Reason = "NotProgrammed"
				if gl != nil {
					if c := meta.FindStatusCondition(gl.Conditions, string(gwv1.ListenerConditionProgrammed)); c != nil {
						ls.Reason = c.Reason
					}
				}
			}
			if !ls.Ready {
				notReady = append(notReady, ls.Name+" ("+ls.Reason+")")
			}
		}
		// A condition that keeps the previous Gateway (TooManyListeners, NameInUse…) stays.
		if c := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason != v1alpha1.ReasonPending {
			continue
		}
		gwProgrammed := meta.IsStatusConditionTrue(gs.Conditions, string(gwv1.GatewayConditionProgrammed))
		var refused *metav1.Condition // the ListenerSet, when the shared Gateway does not take it
		if tn.set != nil {
			if a := meta.FindStatusCondition(gs.Conditions, string(gwv1.ListenerSetConditionAccepted)); a != nil && a.Status == metav1.ConditionFalse {
				refused = a
			}
		}
		var c metav1.Condition
		switch {
		case refused != nil:
			c = metav1.Condition{Status: metav1.ConditionFalse, Reason: refused.Reason,
				Message: fmt.Sprintf("the shared Gateway does not take ListenerSet %s/%s: %s", tn.set.Namespace, tn.set.Name, refused.Message)}
		case len(notReady) > 0:
			c = metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonListenersNotReady,
				Message: fmt.Sprintf("%d of %d listeners not ready: %s", len(notReady), len(tn.Status.Listeners), strings.Join(notReady, ", "))}
		case !gwProgrammed:
			c = metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonPending, Message: "the Gateway is not programmed"}
			if gc := meta.FindStatusCondition(gs.Conditions, string(gwv1.GatewayConditionProgrammed)); gc != nil {
				c.Message = "the Gateway is not programmed: " + gc.Message
			}
		default:
			c = metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReady,
				Message: fmt.Sprintf("the Gateway and its %d listeners are programmed", len(tn.Status.Listeners))}
		}
		c.Type, c.ObservedGeneration = v1alpha1.ConditionReady, tn.Status.ObservedGeneration
		// The stored conditions, not render's Pending placeholder: a Ready that stays True
		// keeps its LastTransitionTime.
		conditions.Set(&tn.Status.Conditions, tn.stored, c, now)
	}
}

// setAsGateway is what translate says of a rendered ListenerSet, in the shape Complete reads
// a Gateway's status in: its listeners and conditions, and the addresses of the shared
// Gateway it is on (nil until translate reports the set).
func setAsGateway(st *translate.Status, set *gwv1.ListenerSet) *gwv1.GatewayStatus {
	ss := st.ListenerSet(set.Namespace, set.Name)
	if ss == nil {
		return nil
	}
	gs := &gwv1.GatewayStatus{Conditions: ss.Conditions}
	ref := set.Spec.ParentRef
	if parent := st.Gateway(string(ptrOr(ref.Namespace, gwv1.Namespace(set.Namespace))), string(ref.Name)); parent != nil && meta.IsStatusConditionTrue(ss.Conditions, string(gwv1.ListenerSetConditionAccepted)) {
		gs.Addresses = parent.Addresses
	}
	for _, l := range ss.Listeners {
		gs.Listeners = append(gs.Listeners, gwv1.ListenerStatus{Name: l.Name, SupportedKinds: l.SupportedKinds, AttachedRoutes: l.AttachedRoutes, Conditions: l.Conditions})
	}
	return gs
}

// completeExposures fills in Programmed (the route accepted on its listener, the listener
// programmed) and the addresses from translate's status.
func completeExposures(out *Result, st *translate.Status, now func() metav1.Time) {
	sets := byName(out.ListenerSets)
	gateways := map[[2]string]*gwv1.GatewayStatus{} // each tenant's, looked up once
	var tlsRoutes statusCursor[gwv1.TLSRouteStatus]
	var tcpRoutes statusCursor[gwv1.TCPRouteStatus]
	if st != nil {
		tlsRoutes.list, tcpRoutes.list = st.TLSRoutes, st.TCPRoutes
	}
	for i := range out.Exposures {
		x := &out.Exposures[i]
		if x.route == "" || st == nil || !x.Rendered {
			continue
		}
		gs, seen := gateways[x.gateway]
		if !seen {
			gs = st.Gateway(x.gateway[0], x.gateway[1])
			if ls := sets[nsName{x.gateway[0], x.gateway[1]}]; gs == nil && ls != nil {
				// A TenantGateway on a shared Gateway: its listeners are its ListenerSet's.
				gs = setAsGateway(st, ls)
			}
			gateways[x.gateway] = gs
		}
		if gs == nil {
			continue
		}
		x.Status.Addresses = nil
		for _, a := range gs.Addresses {
			x.Status.Addresses = append(x.Status.Addresses, a.Value)
		}
		var parents []gwv1.RouteParentStatus
		if x.route == "TLSRoute" {
			if rs := tlsRoutes.find(x.Namespace, x.Name); rs != nil {
				parents = rs.Parents
			}
		} else if rs := tcpRoutes.find(x.Namespace, x.Name); rs != nil {
			parents = rs.Parents
		}
		x.Status.Access = st.Access(x.route, x.Namespace, x.Name)
		completeMembers(x, st, now)
		c := metav1.Condition{Type: v1alpha1.ConditionProgrammed, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNotProgrammed,
			Message: "the route has no status from the Gateway", ObservedGeneration: x.Status.ObservedGeneration}
		for _, p := range parents {
			if a := meta.FindStatusCondition(p.Conditions, string(gwv1.RouteConditionAccepted)); a != nil {
				if a.Status != metav1.ConditionTrue {
					c.Message = "the route is not accepted: " + a.Reason + ": " + a.Message
					continue
				}
				listenerOK := false
				for _, ls := range gs.Listeners {
					if string(ls.Name) == x.Status.Listener {
						listenerOK = meta.IsStatusConditionTrue(ls.Conditions, string(gwv1.ListenerConditionProgrammed))
					}
				}
				if !listenerOK {
					c.Message = "listener " + x.Status.Listener + " is not programmed"
					continue
				}
				c.Status, c.Reason, c.Message = metav1.ConditionTrue, v1alpha1.ReasonProgrammed, x.serving
			}
		}
		conditions.Set(&x.Status.Conditions, x.stored, c, now)
	}
}

// statusCursor finds statuses in translate's list (namespace/name order) for names asked
// in that order too, as Complete walks the exposures: one walk along the list, where a
// binary search for each of 10 000 exposures was a quarter of Complete. A name asked out of
// order is searched for.
type statusCursor[T any] struct {
	list []translate.ObjectStatus[T]
	next int
}

func (c *statusCursor[T]) find(namespace, name string) *T {
	compare := func(o *translate.ObjectStatus[T]) int {
		return resources.CompareNames(o.Namespace, o.Name, namespace, name)
	}
	if c.next > 0 && compare(&c.list[c.next-1]) >= 0 {
		// Out of order: searched for.
		i, _ := slices.BinarySearchFunc(c.list, 0, func(o translate.ObjectStatus[T], _ int) int { return compare(&o) })
		c.next = i
	}
	for c.next < len(c.list) && compare(&c.list[c.next]) < 0 {
		c.next++
	}
	if c.next < len(c.list) && compare(&c.list[c.next]) == 0 {
		return &c.list[c.next].Status
	}
	return nil
}
