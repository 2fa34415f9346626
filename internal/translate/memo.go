package translate

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/snapshot"
)

// Memo carries work from one Translate to the next, so that a change of a few routes among
// 100 000 hostnames does not translate them all again: a one-route change must apply within
// 50 ms (docs/performance.md, route scale). Pass the same Memo in Options to successive calls; it is not safe for concurrent
// use. Translate with a Memo returns what it returns without one, except that the conditions
// of a route taken from the memo keep the LastTransitionTime they were computed with:
// nothing they depend on changed since.
//
// The memo relies on objects being immutable, as file.Load and the Kubernetes source
// guarantee (a changed object is a new pointer), and remembers by object identity:
//   - routes that passed validation (a route's checks look at the route alone);
//   - the translation of each route, its status and its attachments to listeners, valid as
//     long as everything else a route depends on (the objects of every kind that is not a
//     route in resources.Kinds, and the options) is the very same set of objects as in the
//     previous call; otherwise every route is translated again;
//   - the precedence order of the routes, into which new routes are merged;
//   - the route table of each TLS listener, which the next call derives with the routes
//     that came and went instead of building it again (snapshot.HostTable.Edit).
type Memo struct {
	valid  map[any]bool // routes that passed validation, some maybe gone
	nValid int          // routes of the current call in valid

	ctx       memoContext
	call      uint64             // counts Translate calls: marks the routes reused in one
	routes    map[any]*memoRoute // by route object
	order     []*route           // the previous call's routeList
	listeners map[listenerKey]*memoListener
	status    *Status // the previous call's
	// selectors are the previous call's listeners' allowedRoutes selectors, parsed: a
	// thousand tenants' ListenerSets carry a thousand, the same objects from one call to
	// the next, and parsing them all again cost a translation 10 ms.
	selectors map[*metav1.LabelSelector]parsedSelector
}

// parsedSelector is a label selector as metav1.LabelSelectorAsSelector made it.
type parsedSelector struct {
	sel labels.Selector
	err error
}

// selector is metav1.LabelSelectorAsSelector(ls), taken from the previous call when ls is
// the same object.
func (t *translator) selector(ls *metav1.LabelSelector) (labels.Selector, error) {
	p, ok := t.selectorsPrev[ls]
	if !ok {
		p.sel, p.err = metav1.LabelSelectorAsSelector(ls)
	}
	if t.selectorsNext != nil {
		t.selectorsNext[ls] = p
	}
	return p.sel, p.err
}

// listenerKey names a listener across calls: its Gateway and its index in the Gateway.
type listenerKey struct {
	gw    nsName
	index int
}

// memoListener is a TLS listener's route table as the previous call built it.
type memoListener struct {
	routes *snapshot.HostTable[*snapshot.Route] // in the previous snapshot: never changed
	// contested holds hostnames more than one route claimed since the table was last built
	// in full; it only grows, so it may hold a few that are no longer contested. Only for
	// these does a route that comes or goes need a search for the route that wins.
	contested map[string]bool
}

// memoRoute is one route's translation and the attachments it made.
type memoRoute struct {
	r      *route
	attach []memoAttachment
	call   uint64 // the last call that reused it
}

// memoAttachment locates the listener an attachment was made to: the listener objects are
// built again on every call.
type memoAttachment struct {
	gw       nsName
	listener int // index in the Gateway's listeners
	a        *attachment
}

// memoContext is everything besides the route itself that a route's translation reads:
// the objects of every kind that is not a route (resources.Kinds) nor only the render
// stage's, and the options.
type memoContext struct {
	objects [][]resources.Object // by kind, in the order of resources.Kinds
	// ownStatus, per entry of objects: the kind's status is snigate's to write, and none of
	// its readers here reads it (see sameSpec).
	ownStatus []bool
	opts      Options // without Now, Generation and Memo
}

func newMemoContext(in *resources.Resources, opts Options) memoContext {
	opts.Now, opts.Generation, opts.Memo = nil, 0, nil
	c := memoContext{opts: opts}
	for _, k := range resources.Kinds {
		// The render stage's inputs (TenantGateways, DatabaseExposures, TrustAnchors) reach
		// translate only as what render made of them: a new exposure must not translate
		// every route again.
		if !k.Route && !k.RenderInput {
			c.objects = append(c.objects, k.Objects(in))
			c.ownStatus = append(c.ownStatus, k.OwnStatus)
		}
	}
	return c
}

func (c memoContext) equal(o memoContext) bool {
	if len(c.objects) != len(o.objects) {
		return false
	}
	for i := range c.objects {
		if !slices.EqualFunc(c.objects[i], o.objects[i], func(a, b resources.Object) bool { return resources.SameSpec(a, b, c.ownStatus[i]) }) {
			return false
		}
	}
	return c.opts.ControllerName == o.opts.ControllerName && c.opts.DefaultBindAddress == o.opts.DefaultBindAddress &&
		c.opts.RequireGatewayClass == o.opts.RequireGatewayClass &&
		c.opts.ProvisionedAddresses == o.opts.ProvisionedAddresses && maps.Equal(c.opts.BindPorts, o.opts.BindPorts) &&
		c.opts.UsableAddresses == o.opts.UsableAddresses
}

// unvalidated returns the routes the memo has not seen pass validation.
func unvalidated[T comparable](routes []T, m *Memo) []T {
	if m == nil {
		return routes
	}
	if m.valid == nil {
		m.valid = make(map[any]bool, len(routes))
	}
	var out []T
	for _, r := range routes {
		if m.valid[r] {
			m.nValid++
		} else {
			out = append(out, r)
		}
	}
	return out
}

// validated records a route's validation.
func (m *Memo) validated(obj any, ok bool) {
	if m != nil && ok {
		m.valid[obj] = true
		m.nValid++
	}
}

// endValidation drops the routes that are gone from the valid set, once they are many: the
// set is updated in place, so a change of one route costs one insert, not a new set of all.
// A route that is gone stays valid (objects do not change); it only takes memory.
func (m *Memo) endValidation(in *resources.Resources) {
	if m == nil {
		return
	}
	if len(m.valid) > 2*m.nValid+64 {
		keep := make(map[any]bool, m.nValid)
		for _, k := range resources.Kinds {
			if k.Route {
				for _, r := range k.Objects(in) {
					if m.valid[r] {
						keep[r] = true
					}
				}
			}
		}
		m.valid = keep
	}
	m.nValid = 0
}

// reused reports whether r was taken from the memo in this call.
func (t *translator) reused(r *route) bool {
	return r.memo != nil && r.memo.call == t.opts.Memo.call
}

// route returns the remembered translation of a route object, or nil.
func (t *translator) memoRoute(obj any) *memoRoute {
	if !t.memoOK {
		return nil
	}
	return t.opts.Memo.routes[obj]
}

// saveMemo remembers this call's route translations for the next.
func (t *translator) saveMemo(status *Status) {
	m := t.opts.Memo
	if m == nil {
		return
	}
	m.ctx = t.memoCtx
	m.routes = t.memoNext
	m.order = t.routeList
	m.listeners = t.listenersNext
	m.selectors = t.selectorsNext
	m.status = status
}
