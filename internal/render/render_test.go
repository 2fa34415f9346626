package render

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/probe"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/testutil"
)

func load(t *testing.T, path string) *resources.Resources {
	t.Helper()
	res, err := file.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func readyReason(t *testing.T, out *Result, name string) string {
	t.Helper()
	for _, tn := range out.Tenants {
		if tn.Name == name {
			if c := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				return c.Reason
			}
		}
	}
	t.Fatalf("no Ready condition for %s", name)
	return ""
}

// Bad input never replaces what runs: with the wildcard Secret gone, or too many listeners,
// the previous Gateway is rendered again, the very same object, and Ready says why.
func TestPreviousKeepsServing(t *testing.T) {
	good := load(t, "testdata/existing-secret.in.yaml")
	first, _ := run(good, Options{Now: now})
	if len(first.Gateways) != 1 || readyReason(t, first, "acme") != v1alpha1.ReasonReady {
		t.Fatalf("the good input: %d Gateways, Ready %s", len(first.Gateways), readyReason(t, first, "acme"))
	}

	// The same input again: the same pointers (translate's memo keys on them).
	again, _ := run(good, Options{Now: now, Previous: first})
	if again.Gateways[0] != first.Gateways[0] || again.HTTPRoutes[0] != first.HTTPRoutes[0] {
		t.Error("an unchanged render gave new objects")
	}

	noSecret := *good
	noSecret.Secrets = nil
	kept, tr := run(&noSecret, Options{Now: now, Previous: first})
	if len(kept.Gateways) != 1 || kept.Gateways[0] != first.Gateways[0] {
		t.Fatalf("without the Secret: Gateways %v, want the previous one", kept.Gateways)
	}
	if r := readyReason(t, kept, "acme"); r != v1alpha1.ReasonSecretNotFound {
		t.Errorf("Ready reason %s, want SecretNotFound", r)
	}
	if len(tr.Errors) > 0 {
		t.Errorf("translate rejected the kept Gateway: %v", tr.Errors)
	}

	// Each other kind of bad input keeps the previous Gateway too, and says why.
	tenant := func(change func(*v1alpha1.TenantGateway)) []*v1alpha1.TenantGateway {
		tg := good.TenantGateways[0].DeepCopy()
		change(tg)
		return []*v1alpha1.TenantGateway{tg}
	}
	for _, c := range []struct {
		name   string
		change func(res *resources.Resources)
		reason string
	}{
		{"a wildcard Secret of the wrong type", func(res *resources.Resources) {
			s := good.Secrets[0].DeepCopy()
			s.Type = corev1.SecretTypeOpaque
			res.Secrets = []*corev1.Secret{s}
		}, v1alpha1.ReasonInvalidSecret},
		{"overlapping entries", func(res *resources.Resources) {
			res.TenantGateways = tenant(func(tg *v1alpha1.TenantGateway) {
				tg.Spec.TLSPassthroughListeners = append(tg.Spec.TLSPassthroughListeners,
					v1alpha1.PassthroughListener{Name: "orders", Port: 5433, Hostname: "orders.pg.example.com"})
			})
		}, v1alpha1.ReasonHostnameOverlap},
		{"an invalid spec", func(res *resources.Resources) {
			res.TenantGateways = tenant(func(tg *v1alpha1.TenantGateway) { tg.Spec.TLSPassthroughListeners[0].Port = 443 })
		}, v1alpha1.ReasonInvalid},
		{"a redirect name in use", func(res *resources.Resources) {
			res.HTTPRoutes = append(slices.Clone(res.HTTPRoutes), &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme-http-redirect"}})
		}, v1alpha1.ReasonNameInUse},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := *good
			c.change(&bad)
			kept, tr := run(&bad, Options{Now: now, Previous: first})
			if len(kept.Gateways) != 1 || kept.Gateways[0] != first.Gateways[0] {
				t.Fatalf("Gateways %v, want the previous one", kept.Gateways)
			}
			if r := readyReason(t, kept, "acme"); r != c.reason {
				t.Errorf("Ready reason %s, want %s", r, c.reason)
			}
			if len(tr.Errors) > 0 {
				t.Errorf("translate rejected the kept Gateway: %v", tr.Errors)
			}
		})
	}

	// Too many listeners: an http01 TenantGateway whose routes ask for 64 HTTPS hostnames.
	big := load(t, "testdata/cluster-budget.in.yaml")
	out, _ := run(big, Options{Now: now, CertManager: true})
	if r := readyReason(t, out, "huge"); r != v1alpha1.ReasonTooManyListeners {
		t.Errorf("huge: Ready reason %s, want TooManyListeners", r)
	}
	for _, g := range out.Gateways {
		if g.Name == "huge" {
			t.Error("huge rendered a Gateway over the cap")
		}
	}
	for _, tn := range out.Tenants {
		if tn.Name == "huge" && tn.Status.ListenerCount != 65 {
			t.Errorf("huge: listener count %d, want 65", tn.Status.ListenerCount)
		}
		if tn.Name == "big" {
			c := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionListenerBudget)
			if c == nil || c.Reason != v1alpha1.ReasonNearLimit || !strings.Contains(c.Message, "dns01") {
				t.Errorf("big: ListenerBudget %+v, want NearLimit saying what to do", c)
			}
		}
	}
}

func TestHostsOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a.example.com", "a.example.com", true},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"a.b.example.com", "*.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.pg.example.com", "*.example.com", true},
		{"a.example.com", "b.example.com", false},
		{"*.a.example.com", "*.b.example.com", false},
	} {
		if got := hostsOverlap(c.a, c.b); got != c.want {
			t.Errorf("hostsOverlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestListenerName(t *testing.T) {
	if got := listenerName("app.example.com"); !strings.HasPrefix(got, "https-app-") || len(got) != len("https-app-")+8 {
		t.Errorf("listenerName = %q", got)
	}
	if got := listenerName("*.apps.example.com"); !strings.HasPrefix(got, "https-wildcard-") {
		t.Errorf("listenerName of a wildcard = %q", got)
	}
	if listenerName("a.example.com") == listenerName("a.example.org") {
		t.Error("two hostnames with one name")
	}
}

// In a cluster without cert-manager's CRDs the HTTPS listeners of http01 and dns01 modes say
// so; in standalone mode they say a cluster is needed.
func TestNoCertManagerReason(t *testing.T) {
	res := load(t, "testdata/http01-standalone.in.yaml")
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Now: now}, v1alpha1.ReasonCertificatesNeedCluster},
		{Options{Now: now, NoCertManagerReason: v1alpha1.ReasonCertManagerNotInstalled}, v1alpha1.ReasonCertManagerNotInstalled},
	} {
		out := Render(res, c.opts)
		found := false
		for _, l := range out.Tenants[0].Status.Listeners {
			if strings.HasPrefix(l.Name, "https") {
				found = true
				if l.Reason != c.want {
					t.Errorf("listener %s: reason %q, want %q", l.Name, l.Reason, c.want)
				}
			}
		}
		if !found {
			t.Fatal("no HTTPS listener rendered")
		}
	}
}

// A cert-manager object at a name the TenantGateway renders, which it does not own, is never
// taken over: Ready says NameInUse naming it and the previous objects stay. One it owns (by
// its UID) is its own to update.
func TestCertManagerNameInUse(t *testing.T) {
	res := load(t, "testdata/cluster-http01.in.yaml")
	opts := Options{Now: now, CertManager: true}
	first, _ := run(res, opts)
	if r := readyReason(t, first, "acme"); r == v1alpha1.ReasonNameInUse || len(first.Certificates) == 0 || len(first.Issuers) != 1 {
		t.Fatalf("the free names: Ready %s, %d Certificates, %d Issuers", r, len(first.Certificates), len(first.Issuers))
	}
	tgwUID := first.Gateways[0].OwnerReferences[0].UID

	for _, c := range []struct {
		name     string
		issuer   *cmv1.Issuer
		cert     *cmv1.Certificate
		wantText string // "" when the name is the TenantGateway's own
	}{
		{name: "a foreign Certificate", cert: &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: first.Certificates[1].Name}},
			wantText: "Certificate acme/" + first.Certificates[1].Name},
		{name: "a foreign Issuer", issuer: &cmv1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: "acme-acme"}},
			wantText: "Issuer acme/acme-acme"},
		{name: "a Certificate of another TenantGateway of that name", cert: &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: first.Certificates[0].Name,
			OwnerReferences: []metav1.OwnerReference{{Kind: "TenantGateway", Name: "acme", UID: "another", Controller: ptr(true)}}}},
			wantText: "Certificate acme/" + first.Certificates[0].Name},
		{name: "its own Certificate", cert: &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "acme", Name: first.Certificates[0].Name,
			OwnerReferences: []metav1.OwnerReference{{Kind: "TenantGateway", Name: "acme", UID: tgwUID, Controller: ptr(true)}}}}},
		{name: "a foreign Certificate in another namespace", cert: &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: first.Certificates[0].Name}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := opts
			o.Previous = first
			if c.issuer != nil {
				o.Issuers = []*cmv1.Issuer{c.issuer}
			}
			if c.cert != nil {
				o.Certificates = []*cmv1.Certificate{c.cert}
			}
			out, _ := run(res, o)
			var ready *metav1.Condition
			for _, tn := range out.Tenants {
				if tn.Name == "acme" {
					ready = meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionReady)
				}
			}
			if c.wantText == "" {
				if ready.Reason == v1alpha1.ReasonNameInUse {
					t.Errorf("Ready %+v, want no NameInUse", ready)
				}
				return
			}
			if ready.Reason != v1alpha1.ReasonNameInUse || !strings.Contains(ready.Message, c.wantText) {
				t.Errorf("Ready %+v, want NameInUse naming %s", ready, c.wantText)
			}
			if len(out.Gateways) != 1 || out.Gateways[0] != first.Gateways[0] || len(out.Certificates) != len(first.Certificates) {
				t.Errorf("the previous objects did not stay: %d Gateways, %d Certificates", len(out.Gateways), len(out.Certificates))
			}
		})
	}
}

// The engine listener comes with the first exposure of its engine and goes with the last;
// adding or removing another exposure changes only its own route: the Gateway and the other
// routes are the very same objects (translate's memo, and server-side apply, see no change).
func TestExposureLifecycle(t *testing.T) {
	all := load(t, "testdata/databases.in.yaml")
	with := func(names ...string) *resources.Resources {
		res := *all
		res.DatabaseExposures = nil
		for _, d := range all.DatabaseExposures {
			if slices.Contains(names, d.Name) {
				res.DatabaseExposures = append(res.DatabaseExposures, d)
			}
		}
		return &res
	}
	listeners := func(out *Result) string {
		var names []string
		for _, l := range out.Gateways[0].Spec.Listeners {
			if l.Port != 80 && l.Port != 443 {
				names = append(names, fmt.Sprintf("%s:%d", l.Name, l.Port))
			}
		}
		return strings.Join(names, " ")
	}
	route := func(out *Result, name string) *gwv1.TLSRoute {
		for _, r := range out.TLSRoutes {
			if r.Name == name {
				return r
			}
		}
		return nil
	}
	none, _ := run(with(), Options{Now: now})
	if got := listeners(none); got != "" {
		t.Fatalf("no exposures: listeners %q", got)
	}
	one, _ := run(with("orders"), Options{Now: now, Previous: none})
	if got := listeners(one); got != "tls-postgres:5432" || route(one, "orders") == nil {
		t.Fatalf("orders: listeners %q, routes %d", got, len(one.TLSRoutes))
	}
	two, _ := run(with("orders", "billing"), Options{Now: now, Previous: one})
	if two.Gateways[0] != one.Gateways[0] || route(two, "orders") != route(one, "orders") || route(two, "billing") == nil {
		t.Error("adding billing changed the Gateway or orders' route")
	}
	back, _ := run(with("billing"), Options{Now: now, Previous: two})
	if back.Gateways[0] != two.Gateways[0] || route(back, "billing") != route(two, "billing") || route(back, "orders") != nil {
		t.Error("removing orders changed the Gateway or billing's route, or kept orders' route")
	}
	last, _ := run(with(), Options{Now: now, Previous: back})
	if got := listeners(last); got != "" || len(last.TLSRoutes) != 0 {
		t.Errorf("the last exposure gone: listeners %q, %d routes", got, len(last.TLSRoutes))
	}

	// A TenantGateway that renders nothing new keeps its exposures' routes, and says why
	// for an exposure that had none.
	bad := with("orders", "billing")
	bad.Secrets = nil
	kept, _ := run(bad, Options{Now: now, Previous: one})
	if route(kept, "orders") != route(one, "orders") || route(kept, "billing") != nil {
		t.Fatalf("kept routes: %v", kept.TLSRoutes)
	}
	for _, x := range kept.Exposures {
		c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionAccepted)
		switch x.Name {
		case "orders":
			if x.Rendered || c.Status != metav1.ConditionTrue {
				t.Errorf("orders: rendered %v, Accepted %+v; want its previous status", x.Rendered, c)
			}
		case "billing":
			if c.Reason != v1alpha1.ReasonTenantGatewayNotRendered || !strings.Contains(c.Message, "SecretNotFound") {
				t.Errorf("billing: Accepted %+v", c)
			}
		}
	}
}

// A Ready or Programmed condition that stays True keeps its LastTransitionTime from one
// render to the next (the status is not rewritten with a new time on every pass).
func TestTransitionTimesStay(t *testing.T) {
	res := load(t, "testdata/databases.in.yaml")
	first, _ := run(res, Options{Now: now})
	later := func() metav1.Time { return metav1.NewTime(fixedNow.Add(time.Hour)) }
	// The stored objects now carry the first render's status.
	stored := *res
	stored.TenantGateways = nil
	for _, tg := range res.TenantGateways {
		c := tg.DeepCopy()
		for _, tn := range first.Tenants {
			if tn.Name == c.Name {
				c.Status = tn.Status
			}
		}
		stored.TenantGateways = append(stored.TenantGateways, c)
	}
	stored.DatabaseExposures = nil
	for _, d := range res.DatabaseExposures {
		c := d.DeepCopy()
		for _, x := range first.Exposures {
			if x.Name == c.Name {
				c.Status = x.Status
			}
		}
		stored.DatabaseExposures = append(stored.DatabaseExposures, c)
	}
	second, _ := run(&stored, Options{Now: later, Previous: first})
	if c := meta.FindStatusCondition(second.Tenants[0].Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&fixedNow) {
		t.Errorf("TenantGateway Ready %+v, want True since %v", c, fixedNow)
	}
	for _, x := range second.Exposures {
		if x.Name != "orders" {
			continue
		}
		if c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionProgrammed); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&fixedNow) {
			t.Errorf("orders Programmed %+v, want True since %v", c, fixedNow)
		}
	}
}

// Which CAs a TrustAnchor's backends use: unknown (nil, keep every CA) until every exposure
// naming a TrustAnchor has a probe with a chain; then exactly their chains.
func TestAnchorsInUse(t *testing.T) {
	res := load(t, "testdata/databases.in.yaml")
	out, _ := run(res, Options{Now: now})
	ca := testutil.NewCA(t)
	leaf := ca.Issue(t, "orders.postgres.example.com")
	if got := AnchorsInUse(out, nil); got != nil {
		t.Errorf("before any probe: %v, want nil", got)
	}
	results := map[probe.Key]probe.Result{{"acme", "orders"}: {Reason: v1alpha1.ReasonUnreachable}}
	if got := AnchorsInUse(out, results); got != nil {
		t.Errorf("orders unreachable: %v, want nil", got)
	}
	results[probe.Key{"acme", "orders"}] = probe.Result{Reason: v1alpha1.ReasonVerified, Chain: []*x509.Certificate{leaf.Leaf}}
	got := AnchorsInUse(out, results)
	if c := got[types.NamespacedName{Namespace: "acme", Name: "db-ca"}]; len(c) != 1 || c[0] != leaf.Leaf || len(got) != 1 {
		t.Errorf("orders probed: %v", got)
	}
}

// Render leaves Previous as it was, even when it renders a TenantGateway's previous objects
// again: the result it returns shares no status with Previous, so completing it (or anything
// else writing its status) cannot change what the serving state still shows. The admin
// server encodes that state while the next load runs; a shared listener list was a data race.
func TestKeptStatusIsACopy(t *testing.T) {
	good := load(t, "testdata/databases.in.yaml")
	first, _ := run(good, Options{Now: now})
	var tenants []v1alpha1.TenantGatewayStatus
	for _, tn := range first.Tenants {
		tenants = append(tenants, *tn.Status.DeepCopy())
	}
	var exposures []v1alpha1.DatabaseExposureStatus
	for _, x := range first.Exposures {
		exposures = append(exposures, *x.Status.DeepCopy())
	}
	if len(tenants) == 0 || len(tenants[0].Listeners) == 0 || len(exposures) == 0 {
		t.Fatalf("the good input rendered %d tenants, %d exposures", len(tenants), len(exposures))
	}

	// Without its Secret the TenantGateway renders its previous objects again.
	bad := *good
	bad.Secrets = nil
	kept, _ := run(&bad, Options{Now: now, Previous: first})
	if kept.Gateways[0] != first.Gateways[0] {
		t.Fatal("the previous Gateway was not kept")
	}
	// Write every status field of the kept result, as a later Complete or probe might.
	for i := range kept.Tenants {
		tn := &kept.Tenants[i]
		for j := range tn.Status.Listeners {
			tn.Status.Listeners[j].Ready = !tn.Status.Listeners[j].Ready
			tn.Status.Listeners[j].AttachedRoutes += 7
			tn.Status.Listeners[j].Reason = "Scribbled"
		}
		for j := range tn.Status.Conditions {
			tn.Status.Conditions[j].Message = "scribbled"
		}
		for name := range tn.held {
			tn.held[name] = "Scribbled"
		}
	}
	for i := range kept.Exposures {
		x := &kept.Exposures[i]
		for j := range x.Status.Conditions {
			x.Status.Conditions[j].Message = "scribbled"
		}
		for j := range x.Status.Hostnames {
			x.Status.Hostnames[j] = "scribbled.example"
		}
	}
	for i, tn := range first.Tenants {
		if !equality.Semantic.DeepEqual(tn.Status, tenants[i]) {
			t.Errorf("TenantGateway %s: writing the kept result changed the previous status:\n%+v\nwas\n%+v", tn.Name, tn.Status, tenants[i])
		}
		for name, reason := range tn.held {
			if reason == "Scribbled" {
				t.Errorf("TenantGateway %s: listener %s's held reason is shared with the kept result", tn.Name, name)
			}
		}
	}
	for i, x := range first.Exposures {
		if !equality.Semantic.DeepEqual(x.Status, exposures[i]) {
			t.Errorf("DatabaseExposure %s: writing the kept result changed the previous status:\n%+v\nwas\n%+v", x.Name, x.Status, exposures[i])
		}
	}
}

// TestCheckKeepsADefaultedInput: an exposure the API server defaulted already is kept as it
// is, not copied (a copy of each of 10 000 stayed in the memo as long as the exposure); one
// that needs its defaults gets them on a copy, and the input is left as it was.
func TestCheckKeepsADefaultedInput(t *testing.T) {
	r := &renderer{prev: newMemo(), out: &Result{memo: newMemo()}}
	enabled := true
	defaulted := &v1alpha1.DatabaseExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db", Labels: map[string]string{"x": "y"}},
		Spec: v1alpha1.DatabaseExposureSpec{Engine: v1alpha1.EngineRedis, BackendRef: v1alpha1.DatabaseBackendRef{Name: "db", Port: 6379}, TLS: v1alpha1.DatabaseTLS{Enabled: &enabled}}}
	if c := r.check(defaulted); c.d != defaulted || len(c.errs) > 0 {
		t.Fatalf("a defaulted input was copied (%v) or refused: %v", c.d != defaulted, c.errs)
	}
	bare := defaulted.DeepCopy()
	bare.Spec.TLS.Enabled = nil
	c := r.check(bare)
	if c.d == bare || c.d.Spec.TLS.Enabled == nil || !*c.d.Spec.TLS.Enabled || len(c.errs) > 0 {
		t.Fatalf("the defaults were not applied to a copy: %+v, %v", c.d.Spec.TLS, c.errs)
	}
	if bare.Spec.TLS.Enabled != nil || c.d.Name != "db" || c.d.Labels["x"] != "y" {
		t.Fatalf("the input changed, or the copy lost its metadata: %+v / %+v", bare.Spec.TLS, c.d.ObjectMeta)
	}
}
