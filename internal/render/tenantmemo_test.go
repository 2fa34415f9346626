package render

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/testutil/platform"
	"github.com/snigate/snigate/internal/translate"
)

// withoutTenantMemo is p whose next render renders every TenantGateway and exposure anew.
func withoutTenantMemo(p *Result) *Result {
	q := *p
	m := *p.memo
	m.tenants, m.exposures = map[nsName]*tenantMemo{}, map[nsName]*exposureMemo{}
	q.memo = &m
	return &q
}

// comparable is what a result holds for its reader: everything but the memo.
func comparableResult(r *Result) Result {
	c := *r
	c.memo = nil
	return c
}

// mutations are the changes TestTenantMemoRendersAsAnew applies to an input: every object
// of every kind removed, copied (a new pointer, the same content: what an informer hands
// over after a resync or a status write) and changed (labels, generation; a Namespace
// loses or gains its tree label), one at a time, and probe verdicts for every exposure.
func mutations(res *resources.Resources, base *Result) map[string]func() (*resources.Resources, func(*Options)) {
	out := map[string]func() (*resources.Resources, func(*Options)){}
	for i := range resources.Kinds {
		k := &resources.Kinds[i]
		objs := k.Objects(res)
		for j, o := range objs {
			name := k.Name + " " + o.GetNamespace() + "/" + o.GetName()
			with := func(f func([]resources.Object) []resources.Object) func() (*resources.Resources, func(*Options)) {
				return func() (*resources.Resources, func(*Options)) {
					next := *res
					k.Set(&next, f(append([]resources.Object(nil), objs...)))
					return &next, nil
				}
			}
			out[name+" removed"] = with(func(os []resources.Object) []resources.Object { return append(os[:j], os[j+1:]...) })
			out[name+" copied"] = with(func(os []resources.Object) []resources.Object {
				os[j] = os[j].DeepCopyObject().(resources.Object)
				return os
			})
			if metav1.GetControllerOf(o) != nil {
				// Another owner's object at a rendered name.
				out[name+" disowned"] = with(func(os []resources.Object) []resources.Object {
					c := os[j].DeepCopyObject().(resources.Object)
					c.SetOwnerReferences(nil)
					os[j] = c
					return os
				})
			}
			out[name+" changed"] = with(func(os []resources.Object) []resources.Object {
				c := os[j].DeepCopyObject().(resources.Object)
				labels := map[string]string{"changed": "yes"}
				for k, v := range c.GetLabels() {
					if k != LabelGateway {
						labels[k] = v
					}
				}
				if c.GetLabels()[LabelGateway] == "" && k.Name == "Namespace" && len(res.TenantGateways) > 0 {
					labels[LabelGateway] = res.TenantGateways[0].Namespace
				}
				c.SetLabels(labels)
				c.SetGeneration(c.GetGeneration() + 1)
				os[j] = c
				return os
			})
		}
	}
	// Kind by kind, what the render reads of them beyond names and labels.
	for j, a := range res.TrustAnchors {
		out["TrustAnchor "+a.Name+" released"] = func() (*resources.Resources, func(*Options)) {
			next := *res
			next.TrustAnchors = slices.Clone(res.TrustAnchors)
			c := a.DeepCopy()
			c.Spec.Release = "other-release"
			next.TrustAnchors[j] = c
			return &next, nil
		}
	}
	for j, svc := range res.Services {
		out["Service "+svc.Namespace+"/"+svc.Name+" without ports"] = func() (*resources.Resources, func(*Options)) {
			next := *res
			next.Services = slices.Clone(res.Services)
			c := svc.DeepCopy()
			c.Spec.Ports = nil
			next.Services[j] = c
			return &next, nil
		}
	}
	out["foreign TLSRoutes"] = func() (*resources.Resources, func(*Options)) {
		// A route of the tree's own, not rendered, claiming each rendered route's
		// hostnames on the same parent, and older: hostnameOwners must see it.
		next := *res
		next.TLSRoutes = slices.Clone(res.TLSRoutes)
		for _, tr := range res.TLSRoutes {
			if tr.Labels[LabelTenantGateway] == "" {
				continue
			}
			c := tr.DeepCopy()
			c.Name, c.Labels, c.OwnerReferences = tr.Name+"-foreign", nil, nil
			c.CreationTimestamp = metav1.NewTime(fixedNow.Add(-time.Hour))
			next.TLSRoutes = append(next.TLSRoutes, c)
		}
		return &next, nil
	}
	// cert-manager's objects, one change at a time: the Certificates' Secrets written; each
	// rendered Issuer and Certificate present, the first another owner's; the Certificates
	// exposures name present.
	out["Certificate Secrets written"] = func() (*resources.Resources, func(*Options)) {
		next := *res
		next.Secrets = slices.Clone(res.Secrets)
		for _, c := range base.Certificates {
			next.Secrets = append(next.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Spec.SecretName},
				Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: []byte("c"), corev1.TLSPrivateKeyKey: []byte("k")}})
		}
		return &next, nil
	}
	out["an Issuer another owner's"] = func() (*resources.Resources, func(*Options)) {
		issuers := firstDisowned(base.Issuers)
		return res, func(o *Options) { o.Issuers = issuers }
	}
	out["a Certificate another owner's"] = func() (*resources.Resources, func(*Options)) {
		certs := firstDisowned(base.Certificates)
		return res, func(o *Options) { o.Certificates = certs }
	}
	out["the exposures' Certificates"] = func() (*resources.Resources, func(*Options)) {
		var certs []*cmv1.Certificate
		for _, x := range res.DatabaseExposures {
			if ref := x.Spec.CertificateRef; ref != nil {
				certs = append(certs, &cmv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: x.Namespace, Name: ref.Name},
					Spec: cmv1.CertificateSpec{SecretName: ref.Name + "-secret"}})
			}
		}
		return res, func(o *Options) { o.Certificates = certs }
	}
	out["the exposures' TrustAnchors"] = func() (*resources.Resources, func(*Options)) {
		next := *res
		next.TrustAnchors = slices.Clone(res.TrustAnchors)
		for _, x := range res.DatabaseExposures {
			if ref := x.Spec.TrustAnchorRef; ref != nil {
				next.TrustAnchors = append(next.TrustAnchors, &v1alpha1.TrustAnchor{ObjectMeta: metav1.ObjectMeta{Namespace: x.Namespace, Name: ref.Name},
					Spec: v1alpha1.TrustAnchorSpec{Release: "anchor-release"}})
			}
		}
		return &next, nil
	}
	out["probes"] = func() (*resources.Resources, func(*Options)) {
		return res, func(o *Options) {
			o.Probes = map[[2]string]Probe{}
			for i, x := range res.DatabaseExposures {
				reason := v1alpha1.ReasonVerified
				if i%2 == 1 {
					reason = "HostnameMismatch"
				}
				o.Probes[[2]string{x.Namespace, x.Name}] = Probe{Reason: reason, Message: "probed"}
				for _, m := range x.Spec.Members {
					o.Probes[[2]string{x.Namespace, MemberRoute(x.Name, m.Name)}] = Probe{Reason: reason, Message: "member probed"}
				}
			}
		}
	}
	return out
}

// TestTenantMemoRendersAsAnew: for every golden input, as a cluster holds it once rendered
// (its rendered objects applied), and for every change of it, the render that takes the
// tenants whose answers hold from the memo equals the render that renders every tenant
// anew, and so does the render after it (the change undone), whose memo the first left.
func TestTenantMemoRendersAsAnew(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	replayed, exposures, known := 0, 0, 0
	for _, in := range ins {
		t.Run(strings.TrimSuffix(filepath.Base(in), ".in.yaml"), func(t *testing.T) {
			loaded, err := file.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			// UIDs, as a cluster's objects have: what is rendered is then owned (ownerRefs).
			for i := range resources.Kinds {
				for _, o := range resources.Kinds[i].Objects(loaded) {
					o.SetUID(types.UID(resources.Kinds[i].Name + "/" + o.GetNamespace() + "/" + o.GetName()))
				}
			}
			opts := goldenOptions(in)
			first := Render(loaded, opts)
			res := first.Merge(loaded)
			// In namespace/name order, as the cluster lists it: the memos' answers are then
			// asked again only where an object changed (changes.go), which this test checks.
			platform.Sort(res)
			opts.Previous = first
			base := Render(res, opts)
			complete(base, res, opts.Now)
			for name, mutate := range mutations(res, base) {
				next, adjust := mutate()
				o := opts
				if adjust != nil {
					adjust(&o)
				}
				o.Previous = base
				if c := changesSince(base.memo, next, o); c.known {
					known++
				}
				memo := Render(next, o)
				o.Previous = withoutTenantMemo(base)
				anew := Render(next, o)
				// Completed, as the runner does: Complete must not reach into the memo.
				complete(memo, next, o.Now)
				complete(anew, next, o.Now)
				if diff := cmp.Diff(comparableResult(anew), comparableResult(memo), cmpOptions...); diff != "" {
					t.Fatalf("%s: the memo's render differs from rendering anew (-anew +memo):\n%s", name, diff)
				}
				// Undone, from each: the memo carried over a replay must still hold.
				o = opts
				o.Previous = memo
				back := Render(res, o)
				o.Previous = withoutTenantMemo(memo)
				backAnew := Render(res, o)
				complete(back, res, o.Now)
				complete(backAnew, res, o.Now)
				if diff := cmp.Diff(comparableResult(backAnew), comparableResult(back), cmpOptions...); diff != "" {
					t.Fatalf("%s undone: the memo's render differs from rendering anew (-anew +memo):\n%s", name, diff)
				}
				for k, m := range memo.memo.tenants {
					if base.memo.tenants[k] == m {
						replayed++ // taken from the memo, not rendered anew
					}
				}
				for k, m := range memo.memo.exposures {
					if base.memo.exposures[k] == m && base.memo.tenants[m.key.tenant] != memo.memo.tenants[m.key.tenant] {
						exposures++ // taken from the memo in a tenant rendered anew
					}
				}
			}
		})
	}
	if replayed == 0 || exposures == 0 || known == 0 {
		t.Fatalf("%d tenants and %d exposures taken from the memo, %d changes known by name: the test compared nothing", replayed, exposures, known)
	}
	t.Logf("%d tenants and %d exposures taken from the memo; %d changes known by name", replayed, exposures, known)
}

// complete translates what out rendered with res and completes out's status.
func complete(out *Result, res *resources.Resources, now func() metav1.Time) {
	Complete(out, translate.Translate(out.Merge(res), translate.Options{Now: now, Generation: 1}).Status, now)
}

// cmpOptions compare results with their unexported fields, pointers by content.
var cmpOptions = []cmp.Option{
	cmp.Exporter(func(reflect.Type) bool { return true }),
	cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) }),
	cmp.Comparer(func(a, b engine.Engine) bool { return a.Name == b.Name }), // its functions compare by name
}

// TestKeptPreviousForgetsItsRecipes: a TenantGateway that renders its previous objects again
// after its exposures were rendered (its wildcard Secret went missing) serves their previous
// routes; once it renders again, a route whose exposure changed meanwhile is the new one,
// not the previous route the memos kept under the new recipe.
func TestKeptPreviousForgetsItsRecipes(t *testing.T) {
	res := platform.Build(1, 2, false)
	tg := res.TenantGateways[0].DeepCopy()
	tg.Spec.Certificates = v1alpha1.Certificates{Mode: v1alpha1.CertificatesExistingSecret, WildcardSecretRef: &v1alpha1.SecretRef{Name: "wildcard"}}
	res.TenantGateways[0] = tg
	wildcard := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tg.Namespace, Name: "wildcard"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: []byte("c"), corev1.TLSPrivateKeyKey: []byte("k")}}
	res.Secrets = append(res.Secrets, wildcard)
	first := Render(res, Options{Now: now})
	port := func(out *Result, name string) int32 {
		for _, tr := range out.TLSRoutes {
			if tr.Name == name {
				return int32(*tr.Spec.Rules[0].BackendRefs[0].Port)
			}
		}
		t.Fatalf("no route %s", name)
		return 0
	}
	if p := port(first, "db-0"); p != 6379 {
		t.Fatalf("first render: db-0's backend port %d, want 6379", p)
	}

	// db-0 moves to port 6380 while the Secret is gone: the previous route stays.
	moved := *res
	moved.DatabaseExposures = slices.Clone(res.DatabaseExposures)
	d := moved.DatabaseExposures[0].DeepCopy()
	d.Spec.BackendRef.Port = 6380
	moved.DatabaseExposures[0] = d
	moved.Secrets = slices.DeleteFunc(slices.Clone(res.Secrets), func(s *corev1.Secret) bool { return s == wildcard })
	kept := Render(&moved, Options{Now: now, Previous: first})
	if kept.Tenants[0].Rendered {
		t.Fatal("the TenantGateway without its wildcard Secret rendered anew")
	}
	if p := port(kept, "db-0"); p != 6379 {
		t.Fatalf("kept: db-0's backend port %d, want the previous route's 6379", p)
	}

	// The Secret is back: db-0's route is built for port 6380.
	back := moved
	back.Secrets = res.Secrets
	again := Render(&back, Options{Now: now, Previous: kept})
	if !again.Tenants[0].Rendered {
		t.Fatal("the TenantGateway with its Secret back rendered nothing new")
	}
	if p := port(again, "db-0"); p != 6380 {
		t.Fatalf("rendered again: db-0's backend port %d, want 6380 (a previous route was taken for the new recipe)", p)
	}
}

// firstDisowned is a copy of objs whose first object has no owner: another owner's.
func firstDisowned[T interface {
	*E
	metav1.Object
	DeepCopy() *E
}, E any](objs []T) []T {
	out := make([]T, 0, len(objs))
	for i, o := range objs {
		c := T(o.DeepCopy())
		if i == 0 {
			c.SetOwnerReferences(nil)
		}
		out = append(out, c)
	}
	return out
}
