package render

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/testutil/platform"
)

// What Merge gives translate in a cluster, which holds the controller's applied copies of
// earlier renders besides the objects users wrote.
func TestMergeWithAppliedCopies(t *testing.T) {
	res := applied(platform.Build(2, 2, true)) // holds the routes of a first render, as applied
	out := Render(res, Options{Now: now})
	names := func(m *resources.Resources) []string {
		var s []string
		for _, r := range m.TLSRoutes {
			s = append(s, r.Namespace+"/"+r.Name)
		}
		slices.Sort(s)
		return s
	}
	byName := func(m *resources.Resources, ns, name string) *gwv1.TLSRoute {
		for _, r := range m.TLSRoutes {
			if r.Namespace == ns && r.Name == name {
				return r
			}
		}
		return nil
	}

	// Each rendered route once, and the applied copy where it is the render's.
	m := out.Merge(res)
	if got := names(m); !slices.Equal(got, []string{"t-0000/db-0", "t-0000/db-1", "t-0001/db-0", "t-0001/db-1"}) {
		t.Fatalf("routes %v", got)
	}
	if r := byName(m, "t-0000", "db-0"); r != byName(res, "t-0000", "db-0") {
		t.Error("the applied copy of an unchanged route was not the one translated")
	}

	// An applied copy of another render: the render's route is translated.
	changed := *res
	changed.TLSRoutes = slices.Clone(res.TLSRoutes)
	for i, r := range changed.TLSRoutes {
		if r.Namespace == "t-0000" && r.Name == "db-0" {
			c := r.DeepCopy()
			c.Annotations = map[string]string{AnnotationRendered: "0000000000000000"}
			changed.TLSRoutes[i] = c
		}
	}
	if r := Merge(t, out, &changed, "t-0000", "db-0"); r != byName(&resources.Resources{TLSRoutes: out.TLSRoutes}, "t-0000", "db-0") {
		t.Error("a stale applied copy was translated in place of the render")
	}

	// An exposure deleted (its route not yet collected): the route is not translated.
	gone := *res
	gone.DatabaseExposures = slices.DeleteFunc(slices.Clone(res.DatabaseExposures), func(x *v1alpha1.DatabaseExposure) bool {
		return x.Namespace == "t-0001" && x.Name == "db-1"
	})
	if got := names(Render(&gone, Options{Now: now, Previous: out}).Merge(&gone)); slices.Contains(got, "t-0001/db-1") {
		t.Errorf("a deleted exposure's route is translated: %v", got)
	}

	// A TenantGateway whose new input cannot be rendered after a restart (no previous
	// render): what the cluster holds of it keeps serving.
	bad := *res
	bad.TenantGateways = slices.Clone(res.TenantGateways)
	tg := bad.TenantGateways[1].DeepCopy()
	tg.Spec.Apex = "Not A Hostname"
	bad.TenantGateways[1] = tg
	got := names(Render(&bad, Options{Now: now}).Merge(&bad))
	if !slices.Contains(got, "t-0001/db-0") || !slices.Contains(got, "t-0001/db-1") {
		t.Errorf("the applied routes of a TenantGateway that renders nothing new are gone: %v", got)
	}

	// Objects nobody renders stay, whatever their labels.
	mine := &gwv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "t-0000", Name: "hand-written",
		Labels: map[string]string{LabelTenantGateway: "t-0000"}}}
	own := *res
	own.TLSRoutes = append(slices.Clone(res.TLSRoutes), mine)
	if got := names(out.Merge(&own)); !slices.Contains(got, "t-0000/hand-written") {
		t.Errorf("a user's route is gone: %v", got)
	}
}

// Merge merges res into out and returns the TLSRoute ns/name translate gets.
func Merge(t *testing.T, out *Result, res *resources.Resources, ns, name string) *gwv1.TLSRoute {
	t.Helper()
	for _, r := range out.Merge(res).TLSRoutes {
		if r.Namespace == ns && r.Name == name {
			return r
		}
	}
	t.Fatalf("no TLSRoute %s/%s merged", ns, name)
	return nil
}

// matching walks two lists in namespace/name order side by side and indexes them otherwise:
// both ways give every input object the rendered object of its name, whatever the lists.
func TestMatching(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	routes := func(n int) []*gwv1.TLSRoute {
		var out []*gwv1.TLSRoute
		seen := map[[2]string]bool{}
		for range n {
			k := [2]string{fmt.Sprintf("ns-%d", rng.IntN(4)), fmt.Sprintf("r-%d", rng.IntN(8))}
			if !seen[k] {
				seen[k] = true
				out = append(out, &gwv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Namespace: k[0], Name: k[1]}})
			}
		}
		return out
	}
	joined := 0
	for range 2000 {
		in, rendered := routes(rng.IntN(20)), routes(rng.IntN(20))
		for _, l := range [][]*gwv1.TLSRoute{in, rendered} {
			if rng.IntN(3) > 0 {
				slices.SortFunc(l, resources.Compare)
			} else {
				rng.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
			}
		}
		if resources.Sorted(in) && resources.Sorted(rendered) {
			joined++
		}
		got := matching(in, rendered)
		for i, o := range in {
			want := slices.IndexFunc(rendered, func(r *gwv1.TLSRoute) bool { return r.Namespace == o.Namespace && r.Name == o.Name })
			if got[i] != want {
				t.Fatalf("in %v, rendered %v: %s/%s matched %d, want %d", names(in), names(rendered), o.Namespace, o.Name, got[i], want)
			}
		}
	}
	if joined < 500 {
		t.Fatalf("only %d of 2000 cases were walked in order", joined)
	}
}

func names(l []*gwv1.TLSRoute) []string {
	var s []string
	for _, r := range l {
		s = append(s, r.Namespace+"/"+r.Name)
	}
	return s
}
