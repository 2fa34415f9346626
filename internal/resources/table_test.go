package resources

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A Table answers as a scan of its list would, searched in place or indexed.
func TestTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	searched := 0
	for range 2000 {
		var objs []*gwv1.TLSRoute
		for range rng.IntN(20) {
			objs = append(objs, &gwv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{
				Namespace: fmt.Sprintf("ns-%d", rng.IntN(4)), Name: fmt.Sprintf("r-%d", rng.IntN(6))}})
		}
		if rng.IntN(3) > 0 {
			slices.SortFunc(objs, Compare)
		}
		tb := NewTable(objs)
		if tb.Searched() {
			searched++
		}
		for ns := range 5 {
			n := fmt.Sprintf("ns-%d", ns)
			var want []*gwv1.TLSRoute
			for _, o := range objs {
				if o.Namespace == n {
					want = append(want, o)
				}
			}
			if got := tb.In(n); !slices.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("%v: In(%s) = %v, want %v", names(objs), n, names(got), names(want))
			}
			for name := range 7 {
				k := [2]string{n, fmt.Sprintf("r-%d", name)}
				var want *gwv1.TLSRoute
				if i := slices.IndexFunc(objs, func(o *gwv1.TLSRoute) bool { return o.Namespace == k[0] && o.Name == k[1] }); i >= 0 {
					want = objs[i]
				}
				if got := tb.Get(k[0], k[1]); got != want {
					t.Fatalf("%v: Get(%v) = %p, want %p", names(objs), k, got, want)
				}
			}
		}
	}
	if searched < 500 {
		t.Fatalf("only %d of 2000 lists were searched in place", searched)
	}
}

func names(l []*gwv1.TLSRoute) []string {
	out := make([]string, len(l))
	for i, o := range l {
		out[i] = o.Namespace + "/" + o.Name
	}
	return out
}
