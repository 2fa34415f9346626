package cluster

import (
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the tenant applier wrote, so that a pass writes only what changed. Every change of
// the cluster (a new DatabaseExposure, a probe's verdict, the status writer's own writes)
// makes a pass, and a pass renders every TenantGateway: applied, every rendered object would
// be one API request (a server-side apply that changes nothing is still a request), and
// every status one more read, so 10 000 exposures cost 20 000 requests per change, which a
// platform's API server (and client-go's rate limit) turns into minutes per change.
//
// An object is applied again when the render made a new one (render hands back the very
// same pointer for an object rendered as before), or when the live object in the cache is
// not the one applied: deleted, its generation moved (someone edited its spec), or a label
// snigate sets changed. A status is written again when it differs from the last one written
// to that very object (its UID). A restart starts with nothing remembered: its first pass
// applies everything, as before.
type applied struct {
	objects map[objectKey]appliedObject
	mu      sync.Mutex // guards status: a pass writes statuses concurrently
	status  map[statusKey]any
}

type appliedObject struct {
	obj        client.Object // the rendered object applied
	generation int64         // the live object's, once seen after the apply (0: not yet)
}

type statusKey struct {
	kind string
	uid  types.UID
}

func newApplied() *applied {
	return &applied{objects: map[objectKey]appliedObject{}, status: map[statusKey]any{}}
}

// live is what the cache holds of an object applied: its generation and labels.
type live struct {
	generation int64
	labels     map[string]string
}

// liveOf looks up the cache's copy of o (stores.get); ok is false when the cache holds
// none.
type liveOf func(o client.Object) (l live, ok bool, err error)

// rendered reports whether o is what was applied last: the same pointer, or, for what is
// copied on its way here (a TrustAnchor's Secrets, Roles and RoleBindings get their kind
// set on a copy), the same content. It reads no cache.
func (a *applied) rendered(o client.Object) bool {
	prev, ok := a.objects[keyOf(o)]
	return ok && (prev.obj == o || equality.Semantic.DeepEqual(prev.obj, o))
}

// unchanged reports whether o, about to be applied, is what was applied last and the live
// object is still that; it records the live generation the first time it sees it.
func (a *applied) unchanged(o client.Object, lv liveOf) (bool, error) {
	if !a.rendered(o) {
		return false, nil
	}
	key := keyOf(o)
	prev := a.objects[key]
	l, ok, err := lv(o)
	if err != nil || !ok {
		return false, err // deleted (or not in the cache yet): apply again
	}
	for k, v := range o.GetLabels() {
		if l.labels[k] != v {
			return false, nil
		}
	}
	switch {
	case prev.generation == 0:
		prev.generation = l.generation
		a.objects[key] = prev
	case prev.generation != l.generation:
		return false, nil
	}
	return true, nil
}

// done records o as applied.
func (a *applied) done(o client.Object) {
	a.objects[keyOf(o)] = appliedObject{obj: o}
}

// forget drops what was recorded of objects not in want (deleted, or no longer rendered).
func (a *applied) forget(want map[objectKey]bool) {
	maps.DeleteFunc(a.objects, func(k objectKey, _ appliedObject) bool { return !want[k] })
}

// lastStatus is the status last written to the object kind/uid (or found there): a pointer
// to a status of the kind's type, the applier's own copy.
func (a *applied) lastStatus(kind string, uid types.UID) (any, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.status[statusKey{kind, uid}]
	return s, ok
}

// statusDone records want (a pointer to the applier's own copy) as the status of kind/uid.
func (a *applied) statusDone(kind string, uid types.UID, want any) {
	if uid != "" {
		a.mu.Lock()
		a.status[statusKey{kind, uid}] = want
		a.mu.Unlock()
	}
}

// statuses is the number of statuses recorded.
func (a *applied) statuses() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.status)
}

// forgetStatus drops the statuses recorded of objects no longer in the cluster.
func (a *applied) forgetStatus(alive map[types.UID]bool) {
	a.mu.Lock()
	maps.DeleteFunc(a.status, func(k statusKey, _ any) bool { return !alive[k.uid] })
	a.mu.Unlock()
}

// metadataOf is what deleting o needs, without touching the cache's object: its kind and
// name.
func metadataOf(gvk schema.GroupVersionKind, o metav1.Object) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: o.GetName()}}
	m.SetGroupVersionKind(gvk)
	return m
}
