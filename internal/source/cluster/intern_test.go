package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
)

func internObj(ns, name, uid, rv string, gen int64) resources.Object {
	return &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		UID: types.UID(uid), ResourceVersion: rv, Generation: gen}}
}

// listed is objs as the informer's cache lists them: in no order, each a copy of its own.
func listed(objs []resources.Object) []resources.Object {
	out := make([]resources.Object, len(objs))
	for i, o := range objs {
		out[i] = shallowCopy(o)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func objNames(objs []resources.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// The interner returns each load's objects in namespace/name order, an unchanged object
// as the same pointer as before, a changed one anew, and says whether translate's reading
// of the kind changed; an earlier load's slice is never written.
func TestInternKeepsUnchangedObjects(t *testing.T) {
	in := newInterner(1)
	var cluster []resources.Object
	for i := range 50 {
		cluster = append(cluster, internObj(fmt.Sprintf("t-%d", i%7), fmt.Sprintf("db-%02d", i), fmt.Sprintf("u%d", i), "1", 1))
	}
	load := func(want bool, what string) []resources.Object {
		t.Helper()
		out, changed := in.intern(0, listed(cluster), true, true)
		if changed != want {
			t.Fatalf("%s: changed %v, want %v", what, changed, want)
		}
		if !slices.IsSorted(objNames(out)) {
			t.Fatalf("%s: not in namespace/name order: %v", what, objNames(out))
		}
		if len(out) != len(cluster) {
			t.Fatalf("%s: %d objects, want %d", what, len(out), len(cluster))
		}
		return out
	}
	first := load(true, "first load")
	firstCopy := slices.Clone(first)
	same := func(a, b []resources.Object, except ...string) {
		t.Helper()
		for i := range a {
			n := objNames(a[i : i+1])[0]
			if slices.Contains(except, n) != (a[i] != b[i]) {
				t.Errorf("%s: same pointer %v", n, a[i] == b[i])
			}
		}
	}

	second := load(false, "nothing changed")
	same(first, second)

	// A status write: a new resourceVersion, the same generation.
	i := slices.IndexFunc(cluster, func(o resources.Object) bool { return o.GetName() == "db-10" })
	cluster[i] = internObj("t-3", "db-10", "u10", "2", 1)
	third := load(false, "a status written")
	same(second, third, "t-3/db-10")
	if third[slices.Index(objNames(third), "t-3/db-10")].GetResourceVersion() != "2" {
		t.Error("the changed object is the old one")
	}
	// A spec change.
	cluster[i] = internObj("t-3", "db-10", "u10", "3", 2)
	fourth := load(true, "a spec changed")
	same(third, fourth, "t-3/db-10")
	// Deleted and created again by the same name.
	cluster[i] = internObj("t-3", "db-10", "u10b", "4", 1)
	fifth := load(true, "created again")
	same(fourth, fifth, "t-3/db-10")
	// One gone, another come: as many names as before.
	cluster[i] = internObj("t-0", "db-00a", "new", "5", 1)
	sixth := load(true, "one gone, one come")
	if slices.Contains(objNames(sixth), "t-3/db-10") || !slices.Contains(objNames(sixth), "t-0/db-00a") {
		t.Fatalf("names after a swap: %v", objNames(sixth))
	}
	// One more, and one fewer.
	cluster = append(cluster, internObj("t-9", "db-99", "u99", "6", 1))
	load(true, "one more")
	cluster = cluster[1:]
	last := load(true, "one fewer")
	load(false, "nothing changed again")
	if !slices.Equal(first, firstCopy) {
		t.Error("an earlier load's slice was written")
	}
	for _, o := range last {
		if o.GetName() == "db-20" && o != first[slices.Index(objNames(first), "t-6/db-20")] {
			t.Error("an object that never changed is not the first load's")
		}
	}
}

// BenchmarkIntern is one load's interning of 10 000 DatabaseExposures when nothing of the
// kind changed, and when one status did.
func BenchmarkIntern(b *testing.B) {
	var cluster []resources.Object
	for i := range 10000 {
		cluster = append(cluster, internObj(fmt.Sprintf("t-%04d", i/10), fmt.Sprintf("db-%d", i), fmt.Sprintf("u%d", i), "1", 1))
	}
	list := listed(cluster)
	b.Run("unchanged", func(b *testing.B) {
		in := newInterner(1)
		in.intern(0, list, true, true)
		for b.Loop() {
			in.intern(0, list, true, true)
		}
	})
	b.Run("one-status", func(b *testing.B) {
		in := newInterner(1)
		in.intern(0, list, true, true)
		rv := 1
		for b.Loop() {
			rv++
			list[0] = internObj(list[0].GetNamespace(), list[0].GetName(), string(list[0].GetUID()), fmt.Sprint(rv), 1)
			in.intern(0, list, true, true)
		}
	})
}
