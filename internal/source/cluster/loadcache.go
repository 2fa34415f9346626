package cluster

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/snigate/snigate/internal/resources"
)

// listCached lists every kind from its informer's own store: the objects as the cache holds
// them, neither copied into a typed list nor copied again. Why not the cached client's List:
// even with client.UnsafeDisableDeepCopy it copies each object's struct into the list's
// Items, and the interner copied the new ones out again so as not to pin the list; at 10 000
// exposures that was a sixth of all the controller allocated while it converged
// (bench/cpscale's heap profile), garbage its collector then had to chase over a live heap of
// 300 MiB. The informer never changes an object it holds (an update replaces it), and
// nothing in snigate changes an object it was given (package resources' contract), so the
// cache's object is the one the pipeline keeps.
func (c *Controller) listCached(ctx context.Context) ([][]resources.Object, error) {
	objs := make([][]resources.Object, len(c.kinds))
	for i, k := range c.kinds {
		var err error
		if objs[i], err = c.cachedObjects(ctx, k); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// cachedObjects lists kind k's objects from its informer's store, in no particular order.
func (c *Controller) cachedObjects(ctx context.Context, k *resources.Kind) ([]resources.Object, error) {
	store, err := informerStore(ctx, c.mgr.GetCache(), k.New())
	if err != nil {
		return nil, fmt.Errorf("listing %ss: %w", k.Name, err)
	}
	items := store.List()
	objs := make([]resources.Object, len(items))
	for j, it := range items {
		o, ok := it.(resources.Object)
		if !ok {
			return nil, fmt.Errorf("listing %ss: the cache holds a %T", k.Name, it)
		}
		objs[j] = o
	}
	return objs, nil
}

// informerStore is the store of obj's kind's informer in informers (the manager's cache):
// what the cache holds, to read in place, never to change.
func informerStore(ctx context.Context, informers cache.Informers, obj client.Object) (toolscache.Store, error) {
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	store, ok := inf.(interface{ GetStore() toolscache.Store })
	if !ok {
		return nil, fmt.Errorf("the cache's informer (%T) has no store", inf)
	}
	return store.GetStore(), nil
}

// stores reads the tenant applier's kinds from their informers' stores, as listCached does
// for the pipeline's, and for the same reason: the cached client's List copies every
// object's struct into its list even with client.UnsafeDisableDeepCopy. A pass looked up
// every rendered object's live copy and swept every labelled route that way: at 10 000
// exposures two lists of 10 000 TLSRoutes (about 20 MiB) copied per pass, for a few fields
// of each. What a store holds is read only.
type stores struct {
	informers cache.Informers
	scheme    *runtime.Scheme
	byKind    map[schema.GroupVersionKind]toolscache.Store
}

func newStores(informers cache.Informers, scheme *runtime.Scheme) *stores {
	return &stores{informers: informers, scheme: scheme, byKind: map[schema.GroupVersionKind]toolscache.Store{}}
}

// of is gvk's store; nil, without error, when the API server does not serve the kind.
func (s *stores) of(ctx context.Context, gvk schema.GroupVersionKind) (toolscache.Store, error) {
	if st, ok := s.byKind[gvk]; ok {
		return st, nil
	}
	o, err := s.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	obj, ok := o.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s: not an object", gvk.Kind)
	}
	st, err := informerStore(ctx, s.informers, obj)
	switch {
	case meta.IsNoMatchError(err):
		return nil, nil // not remembered: its CRD may be installed later
	case err != nil:
		return nil, fmt.Errorf("reading %ss from the cache: %w", gvk.Kind, err)
	}
	s.byKind[gvk] = st
	return st, nil
}

// get is the cached object of gvk at namespace/name (nil when the cache holds none).
func (s *stores) get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (metav1.Object, error) {
	st, err := s.of(ctx, gvk)
	if err != nil || st == nil {
		return nil, err
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	item, ok, err := st.GetByKey(key)
	if err != nil || !ok {
		return nil, err
	}
	m, ok := item.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("the cache holds a %T for %s %s", item, gvk.Kind, key)
	}
	return m, nil
}

// labelled lists the cached objects of gvk that carry label, in no particular order; a
// kind the API server does not serve lists nothing.
func (s *stores) labelled(ctx context.Context, gvk schema.GroupVersionKind, label string) ([]metav1.Object, error) {
	st, err := s.of(ctx, gvk)
	if err != nil || st == nil {
		return nil, err
	}
	var out []metav1.Object
	for _, item := range st.List() {
		m, ok := item.(metav1.Object)
		if !ok {
			return nil, fmt.Errorf("the cache holds a %T among %ss", item, gvk.Kind)
		}
		if _, ok := m.GetLabels()[label]; ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// labelledAs is stores.labelled with the objects as their type T.
func labelledAs[T metav1.Object](ctx context.Context, s *stores, gvk schema.GroupVersionKind, label string) ([]T, error) {
	objs, err := s.labelled(ctx, gvk, label)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(objs))
	for i, o := range objs {
		t, ok := o.(T)
		if !ok {
			return nil, fmt.Errorf("the cache holds a %T among %ss", o, gvk.Kind)
		}
		out[i] = t
	}
	return out, nil
}
