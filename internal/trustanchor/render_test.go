package trustanchor

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
)

// load returns the first pass of a golden input.
func load(t *testing.T, name string) Input {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	passes, err := decodeGolden(data)
	if err != nil {
		t.Fatal(err)
	}
	return passes[0].in
}

func anchorOf(t *testing.T, out *Result, name string) Anchor {
	t.Helper()
	for _, a := range out.Anchors {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no anchor %s", name)
	return Anchor{}
}

func readyOf(t *testing.T, out *Result, name string) metav1.Condition {
	t.Helper()
	a := anchorOf(t, out, name)
	c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil {
		t.Fatalf("%s: no Ready", name)
	}
	return *c
}

func names[T metav1.Object](objs []T) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.GetName())
	}
	return strings.Join(s, ",")
}

func parseCert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(certDER(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// withSource is in with orders-db-ca's ca.crt replaced by the given pki certificates.
func withSource(in Input, t *testing.T, certs ...string) Input {
	var data []byte
	for _, c := range certs {
		data = append(data, readPKI(t, c)...)
	}
	in.Secrets = append([]*corev1.Secret(nil), in.Secrets...)
	for i, s := range in.Secrets {
		if s.Name == "orders-db-ca" {
			s = s.DeepCopy()
			s.Data = map[string][]byte{"ca.crt": data}
			in.Secrets[i] = s
		}
	}
	return in
}

// applied is in as the cluster holds it after out was applied.
func applied(in Input, out *Result) Input {
	in.Secrets = withApplied(in.Secrets, out.Secrets)
	in.Roles = withApplied(in.Roles, out.Roles)
	in.RoleBindings = withApplied(in.RoleBindings, out.RoleBindings)
	return in
}

var ordersCA = types.NamespacedName{Namespace: "acme", Name: "orders-ca"}

// Render never changes its input, and an unchanged input renders the very objects of the
// previous result (a consumer may compare pointers).
func TestInputUnchangedAndPointersReused(t *testing.T) {
	in := load(t, "published.in.yaml")
	var before []any
	for _, a := range in.TrustAnchors {
		before = append(before, a.DeepCopy())
	}
	for _, s := range in.Secrets {
		before = append(before, s.DeepCopy())
	}
	first := Render(in, Options{Now: now})
	var after []any
	for _, a := range in.TrustAnchors {
		after = append(after, a)
	}
	for _, s := range in.Secrets {
		after = append(after, s)
	}
	if !equality.Semantic.DeepEqual(before, after) {
		t.Error("Render changed its input")
	}
	again := Render(applied(in, first), Options{Now: now, Previous: first})
	for i := range first.Secrets {
		if again.Secrets[i] != first.Secrets[i] {
			t.Errorf("Secret %s: a new object for the same content", first.Secrets[i].Name)
		}
	}
	if again.Roles[0] != first.Roles[0] || again.RoleBindings[0] != first.RoleBindings[0] {
		t.Error("Role or RoleBinding: a new object for the same content")
	}
}

// Read from files (no UID): the objects carry the label and no owner reference (the API
// server refuses one without a UID), and a failing source keeps the previous projection,
// found by the label.
func TestWithoutUID(t *testing.T) {
	in := load(t, "published.in.yaml")
	for i, a := range in.TrustAnchors {
		a = a.DeepCopy()
		a.UID = ""
		in.TrustAnchors[i] = a
	}
	first := Render(in, Options{Now: now})
	for _, s := range first.Secrets {
		if s.OwnerReferences != nil || s.Labels[LabelTrustAnchor] == "" {
			t.Errorf("Secret %s: owners %v, labels %v", s.Name, s.OwnerReferences, s.Labels)
		}
	}
	broken := in
	broken.Secrets = nil
	kept := Render(broken, Options{Now: now, Previous: first})
	if names(kept.Secrets) != "billing-ca.tenant-ca,orders.tenant-ca" || readyOf(t, kept, "orders-ca").Reason != v1alpha1.ReasonSourceNotFound {
		t.Errorf("kept %s, Ready %s", names(kept.Secrets), readyOf(t, kept, "orders-ca").Reason)
	}
}

// The grant of a kept projection follows the current spec: a reader removed while the
// source is broken loses it at once, and with no reader left the Role and RoleBinding go.
// An invalid spec keeps the previous readers.
func TestKeptReadersFollowTheSpec(t *testing.T) {
	in := load(t, "published.in.yaml")
	first := Render(in, Options{Now: now})
	broken := applied(in, first)
	broken.Secrets = nil
	spec := func(change func(*v1alpha1.TrustAnchor)) Input {
		b := broken
		b.TrustAnchors = nil
		for _, a := range in.TrustAnchors {
			a = a.DeepCopy()
			if a.Name == "orders-ca" {
				change(a)
			}
			b.TrustAnchors = append(b.TrustAnchors, a)
		}
		return b
	}

	out := Render(spec(func(a *v1alpha1.TrustAnchor) { a.Spec.Readers = a.Spec.Readers[:1] }), Options{Now: now, Previous: first})
	if len(out.RoleBindings) != 1 || len(out.RoleBindings[0].Subjects) != 1 || out.RoleBindings[0].Subjects[0].Name != "alice" {
		t.Errorf("one reader left: bindings %+v", out.RoleBindings)
	}
	out = Render(spec(func(a *v1alpha1.TrustAnchor) { a.Spec.Readers = nil }), Options{Now: now, Previous: first})
	if len(out.Roles)+len(out.RoleBindings) != 0 || names(out.Secrets) != "billing-ca.tenant-ca,orders.tenant-ca" {
		t.Errorf("no reader left: Roles %s, RoleBindings %s, Secrets %s", names(out.Roles), names(out.RoleBindings), names(out.Secrets))
	}
	out = Render(spec(func(a *v1alpha1.TrustAnchor) { a.Spec.Release = "Not_A_Label" }), Options{Now: now, Previous: first})
	if r := readyOf(t, out, "orders-ca"); r.Reason != v1alpha1.ReasonInvalid || !strings.Contains(r.Message, "spec.release") {
		t.Errorf("invalid: Ready %s %q", r.Reason, r.Message)
	}
	if len(out.RoleBindings) != 1 || len(out.RoleBindings[0].Subjects) != 2 {
		t.Errorf("invalid: bindings %+v, want the previous two readers", out.RoleBindings)
	}
}

// The probe's report decides whether a CA the source dropped stays: nil (not reported yet)
// keeps it, a chain from it keeps it (the CA itself in the chain, or a certificate it
// signed), anything else drops it. A certificate from another CA with the same subject
// (signed by another key) does not count.
func TestInUse(t *testing.T) {
	in := load(t, "rotation-in-use.in.yaml")
	first := Render(in, Options{Now: now})
	next := withSource(applied(in, first), t, "ca-2026.crt")
	ca25, ca26, leaf25, leaf26 := parseCert(t, "ca-2025.crt"), parseCert(t, "ca-2026.crt"), parseCert(t, "leaf-2025.crt"), parseCert(t, "leaf-2026.crt")
	impostor := selfSignedLeaf(t, ca25.Subject)
	if !bytes.Equal(impostor.RawIssuer, ca25.RawSubject) {
		t.Fatal("the impostor's issuer is not the 2025 CA's subject")
	}
	for _, c := range []struct {
		name  string
		inUse map[types.NamespacedName][]*x509.Certificate
		kept  bool
	}{
		{"not reported", nil, true},
		{"a leaf it signed", map[types.NamespacedName][]*x509.Certificate{ordersCA: {leaf26, leaf25}}, true},
		{"the CA itself in the chain", map[types.NamespacedName][]*x509.Certificate{ordersCA: {ca25}}, true},
		{"only the new CA's chain", map[types.NamespacedName][]*x509.Certificate{ordersCA: {leaf26, ca26}}, false},
		{"no backend", map[types.NamespacedName][]*x509.Certificate{}, false},
		{"another TrustAnchor's backend", map[types.NamespacedName][]*x509.Certificate{{Namespace: "acme", Name: "other"}: {leaf25}}, false},
		{"the same issuer name, another key", map[types.NamespacedName][]*x509.Certificate{ordersCA: {impostor, nil}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := Render(next, Options{Now: now, Previous: first, InUse: c.inUse})
			st := anchorOf(t, out, "orders-ca").Status
			want := 1
			if c.kept {
				want = 2
			}
			if len(st.Certificates) != want || st.Certificates[0].Subject != ca26.Subject.String() || (c.kept && !st.Certificates[1].Previous) {
				t.Errorf("certificates %+v, want %d", st.Certificates, want)
			}
			certs, reason, _ := Guard(out.Secrets[0].Data[BundleKey])
			if reason != "" || len(certs) != want {
				t.Errorf("bundle: %d certificates, %q", len(certs), reason)
			}
		})
	}
}

// selfSignedLeaf is a certificate whose issuer name is issuer but which no CA of testdata
// signed.
func selfSignedLeaf(t *testing.T, issuer pkix.Name) *x509.Certificate {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(9), Subject: issuer, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// After a restart the previous projection comes from the cluster only as far as it is
// clean: a published Secret someone edited to hold a key is not published again, and a
// Role someone widened is rendered as it should be.
func TestRestartDistrustsTheCluster(t *testing.T) {
	in := load(t, "published.in.yaml")
	first := Render(in, Options{Now: now})
	cluster := applied(in, first)
	cluster.Secrets = nil
	for _, s := range applied(in, first).Secrets {
		if s.Name == "orders.tenant-ca" {
			s = s.DeepCopy()
			s.Data[BundleKey] = append(s.Data[BundleKey], readPKI(t, "leaf-2025.key")...)
		}
		if s.Name != "orders-db-ca" && s.Name != "billing-db-ca" { // the sources are gone
			cluster.Secrets = append(cluster.Secrets, s)
		}
	}
	cluster.Roles = nil
	for _, r := range applied(in, first).Roles {
		r = r.DeepCopy()
		r.Rules[0].ResourceNames = nil // every Secret of the namespace
		cluster.Roles = append(cluster.Roles, r)
	}
	out := Render(cluster, Options{Now: now})
	if names(out.Secrets) != "billing-ca.tenant-ca" || len(out.Roles) != 0 {
		t.Errorf("Secrets %s, Roles %s: want billing's Secret alone", names(out.Secrets), names(out.Roles))
	}
	if r := readyOf(t, out, "orders-ca"); r.Reason != v1alpha1.ReasonSourceNotFound || !strings.Contains(r.Message, "nothing is published") {
		t.Errorf("orders-ca: %s %q", r.Reason, r.Message)
	}

	// The widened Role, with a good Secret: rendered with the one resource name again.
	cluster.Secrets = applied(in, first).Secrets
	cluster.Secrets = cluster.Secrets[2:] // without the sources
	out = Render(cluster, Options{Now: now})
	if len(out.Roles) != 1 || strings.Join(out.Roles[0].Rules[0].ResourceNames, ",") != "orders.tenant-ca" {
		t.Errorf("Roles %+v", out.Roles)
	}
}

// An object controlled by an earlier TrustAnchor of the same name (another UID: deleted
// and created again) is not this one's until the garbage collector takes it.
func TestAnotherUIDIsForeign(t *testing.T) {
	in := load(t, "published.in.yaml")
	first := Render(in, Options{Now: now})
	again := applied(in, first)
	again.TrustAnchors = nil
	for _, a := range in.TrustAnchors {
		a = a.DeepCopy()
		a.UID = types.UID(strings.Replace(string(a.UID), "7a1e", "bbbb", 1))
		again.TrustAnchors = append(again.TrustAnchors, a)
	}
	out := Render(again, Options{Now: now})
	if r := readyOf(t, out, "orders-ca"); r.Reason != v1alpha1.ReasonNameCollision || len(out.Secrets) != 0 {
		t.Errorf("Ready %s %q, Secrets %s", r.Reason, r.Message, names(out.Secrets))
	}
}

// Conditions keep their LastTransitionTime while their status holds, and move with it.
func TestLastTransitionTime(t *testing.T) {
	in := load(t, "published.in.yaml")
	earlier := metav1.NewTime(fixedNow.Add(-time.Hour))
	for i, a := range in.TrustAnchors {
		a = a.DeepCopy()
		a.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPublished, LastTransitionTime: earlier}}
		in.TrustAnchors[i] = a
	}
	out := Render(in, Options{Now: now})
	if c := readyOf(t, out, "orders-ca"); !c.LastTransitionTime.Equal(&earlier) {
		t.Errorf("still published: %v, want %v", c.LastTransitionTime, earlier)
	}
	in.Secrets = nil
	out = Render(in, Options{Now: now})
	if c := readyOf(t, out, "orders-ca"); !c.LastTransitionTime.Equal(&fixedNow) {
		t.Errorf("no longer published: %v, want %v", c.LastTransitionTime, fixedNow)
	}
}

// A source with the same CA twice publishes it once; status lists at most MaxListed
// certificates of a bigger bundle, and Ready says how many there are.
func TestBundleShape(t *testing.T) {
	in := withSource(load(t, "rotation-in-use.in.yaml"), t, "ca-2025.crt", "ca-2026.crt", "ca-2025.crt")
	out := Render(in, Options{Now: now})
	if st := anchorOf(t, out, "orders-ca").Status; len(st.Certificates) != 2 {
		t.Errorf("duplicates: %+v", st.Certificates)
	}

	var many []byte
	for i := range MaxListed + 2 {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: fmt.Sprintf("CA %d", i)},
			NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		many = append(many, pemOf("CERTIFICATE", der)...)
	}
	in.Secrets[0] = in.Secrets[0].DeepCopy()
	in.Secrets[0].Data = map[string][]byte{"ca.crt": many}
	out = Render(in, Options{Now: now})
	a := anchorOf(t, out, "orders-ca")
	if len(a.Status.Certificates) != MaxListed || !strings.Contains(readyOf(t, out, "orders-ca").Message, fmt.Sprintf("the first %d of the bundle's %d", MaxListed, MaxListed+2)) {
		t.Errorf("%d listed, Ready %q", len(a.Status.Certificates), readyOf(t, out, "orders-ca").Message)
	}
	if certs, _, _ := Guard(out.Secrets[0].Data[BundleKey]); len(certs) != MaxListed+2 {
		t.Errorf("the bundle holds %d", len(certs))
	}
}

// The published objects never grant more than get on the one published Secret, and the
// published Secret never holds more than ca.crt, whatever the golden inputs say.
func TestGrantIsNarrow(t *testing.T) {
	for _, name := range []string{"published.in.yaml", "name-collision.in.yaml", "rotation-restart.in.yaml"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		passes, err := decodeGolden(data)
		if err != nil {
			t.Fatal(err)
		}
		out := runPasses(passes, false, nil)
		secrets := map[string]bool{}
		for _, s := range out.Secrets {
			secrets[s.Name] = true
			if len(s.Data) != 1 || s.Data[BundleKey] == nil || len(s.StringData) != 0 {
				t.Errorf("%s: Secret %s holds %v", name, s.Name, keys(s.Data))
			}
		}
		for _, r := range out.Roles {
			want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{strings.TrimSuffix(r.Name, "-reader")}, Verbs: []string{"get"}}}
			if !equality.Semantic.DeepEqual(r.Rules, want) || !secrets[r.Rules[0].ResourceNames[0]] {
				t.Errorf("%s: Role %s rules %+v", name, r.Name, r.Rules)
			}
		}
		for _, b := range out.RoleBindings {
			if b.RoleRef.Name != b.Name || !strings.HasSuffix(b.Name, ".tenant-ca-reader") {
				t.Errorf("%s: RoleBinding %s binds %+v", name, b.Name, b.RoleRef)
			}
			found := false
			for _, r := range out.Roles {
				found = found || r.Name == b.RoleRef.Name && r.Namespace == b.Namespace
			}
			if !found {
				t.Errorf("%s: RoleBinding %s without its Role", name, b.Name)
			}
		}
	}
}
