package translate

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file"
)

// withMemo translates in with opts and memo and checks that the output is what a translation
// without the memo gives (testOptions' clock is fixed, so even the timestamps agree).
func withMemo(t *testing.T, step string, in *resources.Resources, opts Options, memo *Memo) {
	t.Helper()
	want := render(t, Translate(in, opts))
	opts.Memo = memo
	if got := render(t, Translate(in, opts)); got != want {
		t.Fatalf("%s: with the memo the output differs (-without +with):\n%s", step, cmp.Diff(want, got))
	}
}

// eachRemoved translates res with memo without each object of list (one kind, put back by
// set), then with it again.
func eachRemoved[T interface{ GetName() string }](t *testing.T, kind string, res *resources.Resources, opts Options, memo *Memo, list []T, set func(*resources.Resources, []T)) {
	t.Helper()
	for i := range list {
		r := *res
		set(&r, slices.Delete(slices.Clone(list), i, i+1))
		withMemo(t, "without "+kind+" "+list[i].GetName(), &r, opts, memo)
		withMemo(t, "with "+kind+" "+list[i].GetName(), res, opts, memo)
	}
}

// Every golden input, translated again and again with one memo while routes, then other
// objects, come and go, gives what it gives without the memo.
func TestMemo(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			res, err := file.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			opts, memo := goldenOptions(in), &Memo{}
			withMemo(t, "first", res, opts, memo)
			withMemo(t, "again", res, opts, memo)
			withMemo(t, "reversed", reversed(res), opts, memo)
			// Each route removed, then back.
			eachRemoved(t, "TLSRoute", res, opts, memo, res.TLSRoutes, func(r *resources.Resources, l []*gwv1.TLSRoute) { r.TLSRoutes = l })
			eachRemoved(t, "TCPRoute", res, opts, memo, res.TCPRoutes, func(r *resources.Resources, l []*gwv1.TCPRoute) { r.TCPRoutes = l })
			eachRemoved(t, "HTTPRoute", res, opts, memo, res.HTTPRoutes, func(r *resources.Resources, l []*gwv1.HTTPRoute) { r.HTTPRoutes = l })
			// A route replaced by a copy (a new object, as after an edit).
			if len(res.TLSRoutes) > 0 {
				r := *res
				r.TLSRoutes = slices.Clone(res.TLSRoutes)
				r.TLSRoutes[0] = r.TLSRoutes[0].DeepCopy()
				withMemo(t, "TLSRoute copied", &r, opts, memo)
			}
			// Other objects removed: every route depends on them.
			eachRemoved(t, "Service", res, opts, memo, res.Services, func(r *resources.Resources, l []*corev1.Service) { r.Services = l })
			eachRemoved(t, "Gateway", res, opts, memo, res.Gateways, func(r *resources.Resources, l []*gwv1.Gateway) { r.Gateways = l })
		})
	}
}

// The memo takes routes from the previous call: a route that did not change is the same
// translation, and validation is skipped for it.
func TestMemoReuses(t *testing.T) {
	res, err := file.Load("testdata/precedence.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	memo := &Memo{}
	opts := testOptions()
	opts.Memo = memo
	first := Translate(res, opts)
	second := Translate(res, opts)
	if len(first.Status.TLSRoutes) == 0 {
		t.Fatal("no TLSRoute status")
	}
	a, b := first.Status.TLSRoutes[0].Status.Parents, second.Status.TLSRoutes[0].Status.Parents
	if &a[0] != &b[0] {
		t.Error("an unchanged route was translated again")
	}
	if len(memo.valid) != len(res.TLSRoutes)+len(res.TCPRoutes)+len(res.HTTPRoutes) {
		t.Errorf("%d routes remembered as valid, want every route", len(memo.valid))
	}
}

// Routes that are gone are dropped from the memo's valid set once they outnumber the others,
// and the output stays the same throughout.
func TestMemoForgets(t *testing.T) {
	res, err := file.Load("testdata/precedence.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	memo := &Memo{}
	routes := len(res.TLSRoutes) + len(res.TCPRoutes) + len(res.HTTPRoutes)
	for i := range 200 {
		r := *res
		r.TLSRoutes = slices.Clone(res.TLSRoutes)
		r.TLSRoutes[i%len(r.TLSRoutes)] = r.TLSRoutes[i%len(r.TLSRoutes)].DeepCopy()
		withMemo(t, "copy", &r, testOptions(), memo)
		if len(memo.valid) > 2*routes+64+1 {
			t.Fatalf("after %d changes the memo holds %d valid routes for %d routes", i+1, len(memo.valid), routes)
		}
	}
	if len(memo.routes) != routes {
		t.Errorf("the memo holds %d translated routes, want %d", len(memo.routes), routes)
	}
}

// The options are part of what the memo remembers: turning ProvisionedAddresses on and off
// between calls with one memo gives what each gives without it.
func TestMemoOptions(t *testing.T) {
	res, err := file.Load("testdata/provisioned-addresses.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	memo := &Memo{}
	plain, provisioned := testOptions(), testOptions()
	provisioned.ProvisionedAddresses = true
	for _, step := range []struct {
		name string
		opts Options
	}{{"provisioned", provisioned}, {"plain", plain}, {"provisioned again", provisioned}} {
		withMemo(t, step.name, res, step.opts, memo)
	}
	other := memo.ctx
	other.opts.ProvisionedAddresses = !other.opts.ProvisionedAddresses
	if memo.ctx.equal(other) {
		t.Error("the memo context does not tell ProvisionedAddresses apart")
	}
}

// A cluster's status write gives a Gateway a new object with the same UID, generation,
// labels and annotations: the memo keeps every route. A spec change (a new generation), a
// label or an annotation translates them again; so does any new object of a kind whose
// status is not snigate's (a Service: translate reads its load balancer status).
func TestMemoStatusOnlyChange(t *testing.T) {
	res, err := file.Load("testdata/precedence.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := *res
	base.Gateways = slices.Clone(res.Gateways)
	for i, g := range base.Gateways {
		g = g.DeepCopy()
		g.UID, g.Generation = types.UID("uid-"+g.Name), 3
		base.Gateways[i] = g
	}
	memo := &Memo{}
	opts := testOptions()
	opts.Memo = memo
	first := Translate(&base, opts)
	reusedAfter := func(step string, mutate func(*gwv1.Gateway), want bool) {
		t.Helper()
		r := base
		r.Gateways = slices.Clone(base.Gateways)
		g := r.Gateways[0].DeepCopy()
		g.Status.Conditions = append(g.Status.Conditions, metav1.Condition{Type: "Written", Status: metav1.ConditionTrue})
		if mutate != nil {
			mutate(g)
		}
		r.Gateways[0] = g
		withMemo(t, step, &r, testOptions(), &Memo{}) // the output is right either way
		next := Translate(&r, opts)
		a, b := first.Status.TLSRoutes[0].Status.Parents, next.Status.TLSRoutes[0].Status.Parents
		if got := &a[0] == &b[0]; got != want {
			t.Errorf("%s: routes taken from the memo %v, want %v", step, got, want)
		}
		first = next
	}
	reusedAfter("a status write", nil, true)
	reusedAfter("a new generation", func(g *gwv1.Gateway) { g.Generation++ }, false)
	reusedAfter("a label", func(g *gwv1.Gateway) { g.Labels = map[string]string{"team": "x"} }, false)
	reusedAfter("an annotation", func(g *gwv1.Gateway) { g.Annotations = map[string]string{MaxConnectionsAnnotation: "7"} }, false)
	reusedAfter("the annotation gone again", nil, false)
	reusedAfter("another status write", nil, true)
}
