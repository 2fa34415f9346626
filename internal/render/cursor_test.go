package render

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/translate"
)

// A statusCursor finds what a search of translate's status finds, whatever the order of the
// names asked.
func TestStatusCursor(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	walked := 0
	for range 1000 {
		st := &translate.Status{}
		var names [][2]string
		for ns := range 3 {
			for n := range 4 {
				k := [2]string{fmt.Sprintf("ns-%d", ns), fmt.Sprintf("r-%d", n)}
				names = append(names, k)
				if rng.IntN(2) == 0 {
					st.TLSRoutes = append(st.TLSRoutes, translate.ObjectStatus[gwv1.TLSRouteStatus]{Namespace: k[0], Name: k[1]})
				}
			}
		}
		asked := slices.Clone(names)
		if rng.IntN(2) == 0 {
			rng.Shuffle(len(asked), func(i, j int) { asked[i], asked[j] = asked[j], asked[i] })
		} else {
			walked++
		}
		c := statusCursor[gwv1.TLSRouteStatus]{list: st.TLSRoutes}
		for _, k := range asked[:rng.IntN(len(asked)+1)] {
			if got, want := c.find(k[0], k[1]), st.TLSRoute(k[0], k[1]); got != want {
				t.Fatalf("%v in %v: found %p, want %p", k, st.TLSRoutes, got, want)
			}
		}
	}
	if walked < 300 {
		t.Fatalf("only %d of 1000 walks in order", walked)
	}
}
