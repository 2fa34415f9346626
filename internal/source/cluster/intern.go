package cluster

import (
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
// An object listed from the API server (load's direct path) and seen for the first time (or
// changed) is copied out of the list it came in: an object kept for later passes must not
// pin the whole list's array. The copy is shallow: it shares its maps, slices and strings
// with the listed object, and nothing in snigate changes an object it was given (package
// resources' contract). Objects from the informers' stores (listCached) are kept as they
// are: the cache holds each object once, and an update replaces it rather than changing it.
//
// Most loads list, of most kinds, the same names as the last one: a status written, a
// route changed. Then the last load's order stands and only changed objects are put in
// their places, without a new map or a sort (at 30 000 objects, building the map and
// sorting every kind on every load was a sixth of a reconcile's CPU).
type interner struct {
	kinds []internedKind // by index in Controller.kinds
}

// internedKind is one kind's objects of the last load: sorted, and the place of each.
type internedKind struct {
	sorted []resources.Object
	at     map[types.NamespacedName]int
}

func newInterner(kinds int) *interner {
	return &interner{kinds: make([]internedKind, kinds)}
}

// intern returns objs (kind i's, as listed) with each unchanged object replaced by the one
// the last load returned, in namespace/name order, and whether any object of the kind came,
// went or changed since, as translate reads it (resources.SameSpec: for a kind whose status
// snigate writes, a status write is no change). The informer cache lists in no particular
// order, and the pure stages remember their work by the objects of each kind in order: listed
// as they come, every load looked like a change of every kind. The slice returned is the
// last load's when nothing of the kind changed: callers must not write to it. copyNew:
// objs are a list's items, whose new objects are copied out.
func (in *interner) intern(i int, objs []resources.Object, ownStatus, copyNew bool) ([]resources.Object, bool) {
	prev := &in.kinds[i]
	if prev.at != nil && len(prev.sorted) == len(objs) {
		if out, changed, ok := prev.sameNames(objs, ownStatus, copyNew); ok {
			return out, changed
		}
	}
	next := make(map[types.NamespacedName]int, len(objs))
	out := make([]resources.Object, len(objs))
	changed := prev.at == nil || len(prev.sorted) != len(objs)
	for j, o := range objs {
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		var p resources.Object
		if k, ok := prev.at[key]; ok {
			p = prev.sorted[k]
		}
		if p != nil && sameVersion(p, o) {
			out[j] = p
		} else {
			out[j] = keep(o, copyNew)
			changed = changed || p == nil || !resources.SameSpec(p, o, ownStatus)
		}
	}
	slices.SortFunc(out, resources.Compare) // the order render's change detection expects
	for j, o := range out {
		next[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}] = j
	}
	*prev = internedKind{sorted: out, at: next}
	return out, changed
}

// sameNames interns objs when they are the names of the last load, as many (ok): each in
// its place of the last order. It does not change the kind's record unless ok.
func (k *internedKind) sameNames(objs []resources.Object, ownStatus, copyNew bool) (out []resources.Object, changed, ok bool) {
	type change struct {
		at int
		o  resources.Object
	}
	var moved []change // the objects that changed, and their places
	seen := 0
	for _, o := range objs {
		j, found := k.at[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}]
		if !found {
			return nil, false, false // a name came (and, as many, another went)
		}
		seen++
		if !sameVersion(k.sorted[j], o) {
			moved = append(moved, change{j, o})
		}
	}
	if seen != len(k.sorted) {
		return nil, false, false
	}
	if len(moved) == 0 {
		return k.sorted, false, true
	}
	out = slices.Clone(k.sorted)
	for _, m := range moved {
		changed = changed || !resources.SameSpec(k.sorted[m.at], m.o, ownStatus)
		out[m.at] = keep(m.o, copyNew)
	}
	k.sorted = out
	return out, changed, true
}

// sameVersion says whether o is p unchanged: the same object (UID) at the same
// resourceVersion.
func sameVersion(p, o resources.Object) bool {
	return p.GetUID() == o.GetUID() && p.GetResourceVersion() == o.GetResourceVersion() && o.GetResourceVersion() != ""
}

// keep is o as the interner keeps it: a shallow copy when copyNew.
func keep(o resources.Object, copyNew bool) resources.Object {
	if copyNew {
		return shallowCopy(o)
	}
	return o
}

// shallowCopy is a new object whose fields are o's (o is a pointer to a struct).
func shallowCopy(o resources.Object) resources.Object {
	v := reflect.ValueOf(o).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	return c.Interface().(resources.Object)
}
