package render

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/testutil/platform"
)

// A TargetCache hands back its last map while nothing ProbeTargets reads changed, and
// otherwise what ProbeTargets makes: after a render that replays every exposure, none; after
// an exposure added, one changed (rendered anew: a new target), an EndpointSlice, a Service
// or a bundle changed, each.
func TestTargetCache(t *testing.T) {
	now := func() metav1.Time { return metav1.Unix(1_800_000_000, 0) }
	res := platform.Build(3, 4, true)
	platform.Sort(res)
	out := Render(res, Options{Now: now})
	var c TargetCache
	check := func(step string, res *resources.Resources, out *Result, bundles map[types.NamespacedName][]byte, wantNew bool) map[probe.Key]probe.Target {
		t.Helper()
		before := c.targets
		got, changed := c.Of(res, out, bundles)
		if changed != wantNew {
			t.Fatalf("%s: made anew %v, want %v", step, changed, wantNew)
		}
		if !changed && reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(before).UnsafePointer() {
			t.Fatalf("%s: not made anew, yet not the last map", step)
		}
		if want := ProbeTargets(res, out, bundles, nil); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: %d targets, ProbeTargets makes %d:\n%v\n%v", step, len(got), len(want), got, want)
		}
		return got
	}
	first := check("first", res, out, nil, true)
	if len(first) != 12 {
		t.Fatalf("%d targets, want 12", len(first))
	}
	out = Render(res, Options{Now: now, Previous: out})
	check("replayed", res, out, nil, false)

	res = platform.WithExposure(res, platform.Exposure("t-0001", "db-9"))
	out = Render(res, Options{Now: now, Previous: out})
	if got := check("an exposure added", res, out, nil, true); len(got) != 13 {
		t.Fatalf("%d targets after one added, want 13", len(got))
	}

	// An exposure changed: rendered anew, its target a new pointer.
	changed := *res
	changed.DatabaseExposures = append([]*v1alpha1.DatabaseExposure(nil), res.DatabaseExposures...)
	x := changed.DatabaseExposures[0].DeepCopy()
	x.Spec.BackendRef.Port = 6380
	changed.DatabaseExposures[0] = x
	out = Render(&changed, Options{Now: now, Previous: out})
	check("an exposure changed", &changed, out, nil, true)
	res = &changed

	// Its Service gets the port, and ready endpoints: both read.
	withPort := *res
	withPort.Services = append([]*corev1.Service(nil), res.Services...)
	svc := withPort.Services[0].DeepCopy()
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "other", Port: 6380})
	withPort.Services[0] = svc
	check("a Service changed", &withPort, out, nil, true)
	ready := true
	withEndpoints := withPort
	withEndpoints.EndpointSlices = []*discoveryv1.EndpointSlice{{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("other"), Port: ptr(int32(6380))}},
	}}
	check("an EndpointSlice added", &withEndpoints, out, nil, true)
	check("nothing", &withEndpoints, out, nil, false)

	// A published bundle: its bytes are what count, not the slice they come in.
	ca := []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
	key := types.NamespacedName{Namespace: "t-0000", Name: "db-ca"}
	check("a bundle published", &withEndpoints, out, map[types.NamespacedName][]byte{key: ca}, true)
	check("the same bundle again", &withEndpoints, out, map[types.NamespacedName][]byte{key: append([]byte(nil), ca...)}, false)
}
