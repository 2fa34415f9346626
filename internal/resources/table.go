package resources

import (
	"slices"
	"strings"
)

// Table finds a kind's objects by namespace and name, and by namespace. A list in
// namespace/name order (Compare), as the cluster source lists every kind, is searched where
// it lies; another (files) is indexed by maps the first time it is asked. Why: built as maps
// on every change, the lookups of 10 000 routes and exposures were a tenth of a change's
// render in a cluster, where a change asks for a handful of them, and a tenth of the tenant
// applier's pass, which looks each exposure up once.
//
//	t := resources.NewTable(res.DatabaseExposures)
//	x := t.Get("tenant-a", "orders") // nil when absent
//
// A Table is not safe for concurrent use (its maps are built on first use).
type Table[T interface {
	comparable
	GetNamespace() string
	GetName() string
}] struct {
	objs   []T
	sorted bool
	byName map[[2]string]T
	byNS   map[string][]T
}

// NewTable is the Table of objs, which it keeps (not to be changed while it is used).
func NewTable[T interface {
	comparable
	GetNamespace() string
	GetName() string
}](objs []T) *Table[T] {
	return &Table[T]{objs: objs, sorted: Sorted(objs)}
}

// Searched reports whether the table searches its list in place (the list is in order).
func (t *Table[T]) Searched() bool { return t.sorted }

// Get is the object at namespace/name (the first of that name, as a scan would find), or
// the zero T.
func (t *Table[T]) Get(namespace, name string) T {
	if t.sorted {
		i, ok := slices.BinarySearchFunc(t.objs, [2]string{namespace, name}, func(o T, k [2]string) int {
			return CompareNames(o.GetNamespace(), o.GetName(), k[0], k[1])
		})
		if ok {
			return t.objs[i]
		}
		var none T
		return none
	}
	if t.byName == nil {
		t.byName = make(map[[2]string]T, len(t.objs))
		for _, o := range t.objs {
			k := [2]string{o.GetNamespace(), o.GetName()}
			if _, dup := t.byName[k]; !dup {
				t.byName[k] = o
			}
		}
	}
	return t.byName[[2]string{namespace, name}]
}

// In is the objects of namespace ns, in input order; nil when none. The result is not to
// be appended to.
func (t *Table[T]) In(ns string) []T {
	if t.sorted {
		i, _ := slices.BinarySearchFunc(t.objs, ns, func(o T, ns string) int { return strings.Compare(o.GetNamespace(), ns) })
		j := i
		for j < len(t.objs) && t.objs[j].GetNamespace() == ns {
			j++
		}
		if i == j {
			return nil
		}
		return t.objs[i:j:j]
	}
	if t.byNS == nil {
		t.byNS = map[string][]T{}
		for _, o := range t.objs {
			t.byNS[o.GetNamespace()] = append(t.byNS[o.GetNamespace()], o)
		}
	}
	return t.byNS[ns]
}
