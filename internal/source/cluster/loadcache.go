package cluster

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"

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
	inf, err := c.mgr.GetCache().GetInformer(ctx, k.New())
	if err != nil {
		return nil, fmt.Errorf("listing %ss: %w", k.Name, err)
	}
	store, ok := inf.(interface{ GetStore() toolscache.Store })
	if !ok {
		return nil, fmt.Errorf("listing %ss: the cache's informer (%T) has no store", k.Name, inf)
	}
	items := store.GetStore().List()
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
