package cluster

import (
	"cmp"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/internal/resources"
)

// interner keeps, per kind, the objects of the last load by namespace and name: an object
// whose resourceVersion did not change comes back as the very same pointer. The pure stages
// remember their work by object identity (package resources' contract: a changed object is
// a new pointer), so a change of one object among 10 000 renders and translates that object
// alone; listed afresh each time, every object was new on every change and translate's memo
// never hit.
//
// An object seen for the first time (or changed) is copied out of the list it came in, which
// the informer's cache filled without copies (client.UnsafeDisableDeepCopy): an object kept
// for later passes must not pin the whole list's array. The copy is shallow: it shares its
// maps, slices and strings with the cache's object, which the informer never changes (an
// update replaces it), and nothing in snigate changes an object it was given (package
// resources' contract). A deep copy held a second copy of every object of the cluster.
type interner struct {
	kinds []map[types.NamespacedName]resources.Object // by index in Controller.kinds
}

func newInterner(kinds int) *interner {
	return &interner{kinds: make([]map[types.NamespacedName]resources.Object, kinds)}
}

// intern returns objs (kind i's, as listed) with each unchanged object replaced by the one
// the last load returned, in namespace/name order, and whether any object of the kind came,
// went or changed since, as translate reads it (resources.SameSpec: for a kind whose status
// snigate writes, a status write is no change). The informer cache lists in no particular
// order, and the pure stages remember their work by the objects of each kind in order: listed
// as they come, every load looked like a change of every kind.
func (in *interner) intern(i int, objs []resources.Object, ownStatus bool) ([]resources.Object, bool) {
	prev := in.kinds[i]
	next := make(map[types.NamespacedName]resources.Object, len(objs))
	out := make([]resources.Object, len(objs))
	changed := prev == nil || len(prev) != len(objs)
	for j, o := range objs {
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		if p, ok := prev[key]; ok && p.GetUID() == o.GetUID() && p.GetResourceVersion() == o.GetResourceVersion() && o.GetResourceVersion() != "" {
			out[j] = p
		} else {
			out[j] = shallowCopy(o)
			changed = changed || !ok || !resources.SameSpec(p, o, ownStatus)
		}
		next[key] = out[j]
	}
	in.kinds[i] = next
	slices.SortFunc(out, func(a, b resources.Object) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return out, changed
}

// shallowCopy is a new object whose fields are o's (o is a pointer to a struct).
func shallowCopy(o resources.Object) resources.Object {
	v := reflect.ValueOf(o).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	return c.Interface().(resources.Object)
}
