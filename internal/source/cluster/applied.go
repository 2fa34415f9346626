package cluster

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
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

// liveIndex lists, from the cache and without copies, the objects of the kinds of objs that
// the applier may skip: their generation and labels by key.
func liveIndex(ctx context.Context, cl client.Client, objs []client.Object) (map[objectKey]live, error) {
	kinds := map[schema.GroupVersionKind]bool{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind()] = true
	}
	out := map[objectKey]live{}
	for gvk := range kinds {
		lo, err := cl.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err != nil {
			return nil, err
		}
		list, ok := lo.(client.ObjectList)
		if !ok {
			return nil, fmt.Errorf("%s: not a list type", gvk.Kind)
		}
		if err := cl.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return nil, fmt.Errorf("listing %ss: %w", gvk.Kind, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			m, err := meta.Accessor(it)
			if err != nil {
				return nil, err
			}
			out[objectKey{gvk.Kind, m.GetNamespace(), m.GetName()}] = live{generation: m.GetGeneration(), labels: m.GetLabels()}
		}
	}
	return out, nil
}

// unchanged reports whether o, about to be applied, is what was applied last and the live
// object is still that; it records the live generation the first time it sees it.
func (a *applied) unchanged(o client.Object, lv map[objectKey]live) bool {
	key := keyOf(o)
	prev, ok := a.objects[key]
	// The same pointer, or, for what is copied on its way here (a TrustAnchor's Secrets,
	// Roles and RoleBindings get their kind set on a copy), the same content.
	if !ok || (prev.obj != o && !equality.Semantic.DeepEqual(prev.obj, o)) {
		return false
	}
	l, ok := lv[key]
	if !ok {
		return false // deleted (or not in the cache yet): apply again
	}
	for k, v := range o.GetLabels() {
		if l.labels[k] != v {
			return false
		}
	}
	switch {
	case prev.generation == 0:
		prev.generation = l.generation
		a.objects[key] = prev
	case prev.generation != l.generation:
		return false
	}
	return true
}

// done records o as applied.
func (a *applied) done(o client.Object) {
	a.objects[keyOf(o)] = appliedObject{obj: o}
}

// forget drops what was recorded of objects not in want (deleted, or no longer rendered).
func (a *applied) forget(want map[objectKey]bool) {
	maps.DeleteFunc(a.objects, func(k objectKey, _ appliedObject) bool { return !want[k] })
}

// lastStatus is the status last written to the object kind/uid (or found there).
func (a *applied) lastStatus(kind string, uid types.UID) (any, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.status[statusKey{kind, uid}]
	return s, ok
}

// statusDone records want as the status of kind/uid.
func (a *applied) statusDone(kind string, uid types.UID, want any) {
	if uid != "" {
		a.mu.Lock()
		a.status[statusKey{kind, uid}] = want
		a.mu.Unlock()
	}
}

// forgetStatus drops the statuses recorded of objects no longer in the cluster.
func (a *applied) forgetStatus(alive map[types.UID]bool) {
	a.mu.Lock()
	maps.DeleteFunc(a.status, func(k statusKey, _ any) bool { return !alive[k.uid] })
	a.mu.Unlock()
}

// cachedLabelled lists, from the cache and without copies (read only), the objects of gvk
// that carry label. Every kind the applier renders is watched, so this costs no request; a
// kind the API server does not serve lists nothing. The stale-object sweeps of every pass
// list through here: live lists of every TLSRoute at 10 000 exposures, on every change,
// were the API server's heaviest requests.
func cachedLabelled(ctx context.Context, cl client.Client, gvk schema.GroupVersionKind, label string) ([]metav1.Object, error) {
	lo, err := cl.Scheme().New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	list, ok := lo.(client.ObjectList)
	if !ok {
		return nil, fmt.Errorf("%s: not a list type", gvk.Kind)
	}
	if err := cl.List(ctx, list, client.HasLabels{label}, client.UnsafeDisableDeepCopy); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing %ss: %w", gvk.Kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.Object, 0, len(items))
	for _, it := range items {
		m, err := meta.Accessor(it)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// metadataOf is what deleting o needs, without touching the cache's object: its kind and
// name.
func metadataOf(gvk schema.GroupVersionKind, o metav1.Object) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: o.GetName()}}
	m.SetGroupVersionKind(gvk)
	return m
}
