package resources

import "strings"

// DiffSorted calls changed with the namespace and name of each object that came, went or
// was replaced (a new pointer: package resources' contract is that a changed object is a
// new one) from a to b. Both must be in namespace/name order, as the cluster source lists
// every kind; it reports false, having called changed for some objects only, when either
// is not, and then the caller must take every object as changed. Unchanged lists (the same
// array, which the cluster source hands out for a kind none of whose objects changed) cost
// nothing, and lists of the same names compare pointer by pointer.
//
// Why: the render stage remembers what each TenantGateway and exposure read, and must know
// whether those answers still hold; asking each of 10 000 exposures' questions again on
// every change cost more than the change. What changed, by name, tells which answers can
// have.
func DiffSorted[PT interface {
	comparable
	GetNamespace() string
	GetName() string
}](a, b []PT, changed func(namespace, name string)) bool {
	if len(a) == len(b) {
		if len(a) == 0 || &a[0] == &b[0] {
			return true
		}
		i := 0
		for ; i < len(a); i++ {
			if a[i] == b[i] {
				continue
			}
			if a[i].GetNamespace() != b[i].GetNamespace() || a[i].GetName() != b[i].GetName() {
				break // names moved: walk them in order below
			}
			changed(b[i].GetNamespace(), b[i].GetName())
		}
		if i == len(a) {
			return true
		}
	}
	if !Sorted(a) || !Sorted(b) {
		return false
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var c int
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = Compare(a[i], b[j])
		}
		switch {
		case c < 0: // gone
			changed(a[i].GetNamespace(), a[i].GetName())
			i++
		case c > 0: // came
			changed(b[j].GetNamespace(), b[j].GetName())
			j++
		default:
			if a[i] != b[j] {
				changed(b[j].GetNamespace(), b[j].GetName())
			}
			i++
			j++
		}
	}
	return true
}

// Compare orders objects by namespace, then name: the order the cluster source lists every
// kind in, and the one DiffSorted expects.
func Compare[T interface {
	GetNamespace() string
	GetName() string
}](a, b T) int {
	return CompareNames(a.GetNamespace(), a.GetName(), b.GetNamespace(), b.GetName())
}

// CompareNames is Compare's order for namespaces and names held apart from an object (a
// status, a key looked up).
func CompareNames(aNamespace, aName, bNamespace, bName string) int {
	if c := strings.Compare(aNamespace, bNamespace); c != 0 {
		return c
	}
	return strings.Compare(aName, bName)
}

// Sorted reports whether objs are in strict namespace/name order (Compare).
func Sorted[T interface {
	GetNamespace() string
	GetName() string
}](objs []T) bool {
	for i := 1; i < len(objs); i++ {
		if Compare(objs[i-1], objs[i]) >= 0 {
			return false
		}
	}
	return true
}
