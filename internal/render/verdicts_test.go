package render

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/testutil/platform"
)

// verdictSource plays a probe.Runner: its results, and a version that moves with them.
type verdictSource struct {
	version uint64
	results map[probe.Key]probe.Result
}

func (s *verdictSource) Version() uint64                     { return s.version }
func (s *verdictSource) Results() map[probe.Key]probe.Result { return maps.Clone(s.results) }

// Verdicts from a VerdictCache, as the controller renders them: the same map while nothing
// changed, a verdict that changed (or went) is the one probe question asked again, and the
// render with the memo equals the render anew at every step.
func TestVerdictChangesRenderAsAnew(t *testing.T) {
	res := applied(platform.Build(3, 3, true))
	platform.Sort(res)
	// Each with its endpoint: a verdict converted anew is then a new Probe (its endpoints'
	// array), which the cache must not make of an unchanged one.
	verified := func() probe.Result {
		return probe.Result{Reason: v1alpha1.ReasonVerified, Message: "verified",
			Endpoints: []probe.EndpointResult{{Address: "10.0.0.1:6379", Result: probe.Result{Reason: v1alpha1.ReasonVerified}}}}
	}
	src := &verdictSource{version: 1, results: map[probe.Key]probe.Result{}}
	for _, x := range res.DatabaseExposures {
		src.results[probe.Key{x.Namespace, x.Name}] = verified()
	}
	var cache VerdictCache
	prev := Render(res, Options{Now: now, Probes: cache.Of(src)})
	first, second := probe.Key{"t-0001", "db-0"}, probe.Key{"t-0002", "db-2"}
	steps := []struct {
		name   string
		change func()
		want   []probe.Key // the verdicts changed
	}{
		{"nothing", func() {}, nil},
		{"probed again, the same verdict", func() {
			src.results[first] = verified()
			src.version++ // a conservative source: the cache compares
		}, nil},
		{"one verdict", func() {
			src.results[first] = probe.Result{Reason: v1alpha1.ReasonMissingDNSNames, Message: "the certificate lacks db-0"}
			src.version++
		}, []probe.Key{first}},
		{"one verdict gone", func() { delete(src.results, second); src.version++ }, []probe.Key{second}},
		{"back", func() {
			src.results[first], src.results[second] = verified(), verified()
			src.version++
		}, []probe.Key{first, second}},
	}
	for _, step := range steps {
		before := prev.memo.probes
		step.change()
		probes := cache.Of(src)
		c := changesSince(prev.memo, res, Options{Probes: probes})
		if !c.known || c.allProbes {
			t.Fatalf("%s: changes not known by name (known %v, every verdict %v)", step.name, c.known, c.allProbes)
		}
		var got []probe.Key
		for k := range c.probes {
			got = append(got, k)
		}
		slices.SortFunc(got, func(a, b probe.Key) int { return slices.Compare(a[:], b[:]) })
		if !slices.Equal(got, step.want) {
			t.Errorf("%s: verdicts changed %v, want %v", step.name, got, step.want)
		}
		if len(step.want) == 0 && !sameProbe(probes[first], before[first]) {
			t.Errorf("%s: the cache made a verdict anew", step.name)
		}
		o := Options{Now: now, Probes: probes, Previous: prev}
		memo := Render(res, o)
		o.Previous = withoutTenantMemo(prev)
		o.Previous.memo.probes = nil // every verdict asked again
		anew := Render(res, o)
		complete(memo, res, now)
		complete(anew, res, now)
		if diff := cmp.Diff(comparableResult(anew), comparableResult(memo), cmpOptions...); diff != "" {
			t.Fatalf("%s: the memo's render differs from rendering anew (-anew +memo):\n%s", step.name, diff)
		}
		prev = memo
	}
	for _, e := range prev.Exposures {
		if e.Namespace == first[0] && e.Name == first[1] {
			if c := meta.FindStatusCondition(e.Status.Conditions, v1alpha1.ConditionCertificateVerified); c == nil || c.Reason != v1alpha1.ReasonVerified {
				t.Errorf("%s/%s after the verdicts came back: %+v", e.Namespace, e.Name, c)
			}
		}
	}
}
