package resources

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svc(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// changedByMap is what DiffSorted must find, the slow way: every name whose object differs.
func changedByMap(a, b []*corev1.Service) []string {
	at := map[string]*corev1.Service{}
	for _, o := range a {
		at[o.Namespace+"/"+o.Name] = o
	}
	var out []string
	for _, o := range b {
		k := o.Namespace + "/" + o.Name
		if at[k] != o {
			out = append(out, k)
		}
		delete(at, k)
	}
	for k := range at {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func diffNames(a, b []*corev1.Service) ([]string, bool) {
	seen := map[string]bool{}
	ok := DiffSorted(a, b, func(ns, name string) { seen[ns+"/"+name] = true })
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out, ok
}

// TestDiffSorted: for random sorted lists and random changes of them (objects replaced,
// added, removed), DiffSorted names exactly the objects a map comparison finds; an unsorted
// list is refused.
func TestDiffSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		var a []*corev1.Service
		for i := range rng.IntN(30) {
			a = append(a, svc(fmt.Sprintf("ns-%d", i/7), fmt.Sprintf("s-%02d", i)))
		}
		b := slices.Clone(a)
		if round%5 == 0 {
			b = a // the same array: nothing changed
		}
		for range rng.IntN(4) {
			switch op := rng.IntN(3); {
			case op == 0 && len(b) > 0: // replaced
				i := rng.IntN(len(b))
				b[i] = svc(b[i].Namespace, b[i].Name)
			case op == 1 && len(b) > 0: // removed
				i := rng.IntN(len(b))
				b = slices.Delete(slices.Clone(b), i, i+1)
			default: // added, in its place
				n := svc(fmt.Sprintf("ns-%d", rng.IntN(5)), fmt.Sprintf("n-%02d", rng.IntN(40)))
				i, found := slices.BinarySearchFunc(b, n, Compare[*corev1.Service])
				if !found {
					b = slices.Insert(slices.Clone(b), i, n)
				}
			}
		}
		got, ok := diffNames(a, b)
		if !ok {
			t.Fatalf("round %d: sorted lists refused", round)
		}
		if want := changedByMap(a, b); !slices.Equal(got, want) {
			t.Fatalf("round %d: changed %v, want %v", round, got, want)
		}
	}
	sortedList := []*corev1.Service{svc("a", "x"), svc("b", "x")}
	unsorted := []*corev1.Service{svc("b", "x"), svc("a", "x"), svc("c", "x")}
	if _, ok := diffNames(sortedList, unsorted); ok {
		t.Fatal("an unsorted list was taken")
	}
	if _, ok := diffNames(unsorted, sortedList); ok {
		t.Fatal("an unsorted previous list was taken")
	}
	dup := []*corev1.Service{svc("a", "x"), svc("a", "x"), svc("b", "y")}
	if _, ok := diffNames(sortedList, dup); ok {
		t.Fatal("a list with a name twice was taken")
	}
}
