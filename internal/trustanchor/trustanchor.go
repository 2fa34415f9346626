package trustanchor

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/conditions"
)

// Names and limits of the projection.
const (
	// LabelTrustAnchor marks every rendered object with its TrustAnchor's name.
	LabelTrustAnchor = "snigate.dev/trust-anchor"
	// BundleKey is the one key of the published Secret.
	BundleKey = "ca.crt"
	// MaxListed is how many certificates status.certificates lists (its maxItems).
	MaxListed = 16
)

// SecretName is the published Secret of a release: <release>.tenant-ca. Release names are
// DNS-1035 labels, without a dot, so no Secret a database operator names after a release
// can take it.
func SecretName(release string) string { return release + ".tenant-ca" }

// ReaderName is the Role and RoleBinding of a release: <release>.tenant-ca-reader.
func ReaderName(release string) string { return release + ".tenant-ca-reader" }

// Options configures Render.
type Options struct {
	// Now stamps LastTransitionTime of new conditions (default metav1.Now).
	Now func() metav1.Time
	// Previous is the last result. A TrustAnchor that cannot publish its source keeps its
	// previous projection, and a rotation keeps the previous bundle's CAs that are still in
	// use; without a Previous entry for a TrustAnchor (after a restart), both come from the
	// objects it controls in Input.
	Previous *Result
	// InUse holds, per TrustAnchor, the certificates of the chains its backends serve now,
	// as the certificate probe saw them (leaf and intermediates, any order), a backend
	// counting for the TrustAnchor its DatabaseExposure names in spec.trustAnchorRef. A CA of the
	// previous bundle that the source no longer holds stays published while one of them is
	// that CA or is signed by it. nil means the probe has not reported: every such CA stays
	// (unknown is not unused). A TrustAnchor missing from a non-nil map has no backend
	// serving a chain, and its previous CAs go.
	InUse map[types.NamespacedName][]*x509.Certificate
	// Memo, when set, keeps Guard's verdicts from one Render to the next (nil: every
	// bundle is parsed on every call).
	Memo *GuardMemo
}

// Input is what Render reads: the TrustAnchors, and the Secrets, Roles and RoleBindings of
// their namespaces (the source Secrets, and whatever exists at the names a TrustAnchor
// renders). Render never changes it.
type Input struct {
	TrustAnchors []*v1alpha1.TrustAnchor
	Secrets      []*corev1.Secret
	Roles        []*rbacv1.Role
	RoleBindings []*rbacv1.RoleBinding
}

// Result is what Render made: the whole desired state of every TrustAnchor, in
// namespace/name order. A Secret, Role or RoleBinding that a TrustAnchor controls (and
// labels) and that the Result lacks is stale and may be deleted, whatever Rendered says:
// the previous projection a failing TrustAnchor keeps is in the Result. Objects equal to
// Options.Previous's are its very pointers; treat all of them as read-only.
type Result struct {
	Secrets      []*corev1.Secret
	Roles        []*rbacv1.Role
	RoleBindings []*rbacv1.RoleBinding
	Anchors      []Anchor
}

// Anchor is one TrustAnchor's status and what to tell its owner.
type Anchor struct {
	Namespace string                     `json:"namespace"`
	Name      string                     `json:"name"`
	Status    v1alpha1.TrustAnchorStatus `json:"status"`
	// Rendered is true when this call published the source anew (Ready is True); false
	// when the Result holds the previous projection, or nothing, for it.
	Rendered bool `json:"rendered"`
	// Warnings are for Warning events on the TrustAnchor: a name held by an object it does
	// not control (never overwritten), a private key in the source. They are computed anew
	// by every call; emit them when the Ready reason changes, or let the event recorder
	// aggregate them.
	Warnings []Warning `json:"warnings,omitempty"`
}

// Warning is an Event of type Warning to record on the TrustAnchor.
type Warning struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Bundles returns each TrustAnchor's published ca.crt, by TrustAnchor (the roots clients,
// and the certificate probe, verify the databases with).
func (r *Result) Bundles() map[types.NamespacedName][]byte {
	out := map[types.NamespacedName][]byte{}
	if r == nil {
		return out
	}
	// By name first: a TrustAnchor per tenant made this 1 000 × 1 000 comparisons a pass.
	secrets := make(map[types.NamespacedName]map[string][]byte, len(r.Secrets))
	for _, s := range r.Secrets {
		secrets[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s.Data
	}
	for _, a := range r.Anchors {
		if data, ok := secrets[types.NamespacedName{Namespace: a.Namespace, Name: a.Status.SecretName}]; ok {
			out[types.NamespacedName{Namespace: a.Namespace, Name: a.Name}] = data[BundleKey]
		}
	}
	return out
}

// Render renders every TrustAnchor of in.
func Render(in Input, opts Options) *Result {
	if opts.Now == nil {
		opts.Now = metav1.Now
	}
	r := &renderer{in: in, opts: opts, out: &Result{}, claimed: map[objectKey]string{}}
	r.index()
	anchors := slices.Clone(in.TrustAnchors)
	// Two TrustAnchors of a namespace may name one release: the older renders it (then the
	// name), the other says NameCollision. One that already controls the objects keeps them
	// (the other sees them as not its own).
	slices.SortFunc(anchors, func(a, b *v1alpha1.TrustAnchor) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	for _, a := range anchors {
		r.anchor(a)
	}
	slices.SortFunc(r.out.Anchors, func(a, b Anchor) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	sortObjects(r.out.Secrets)
	sortObjects(r.out.Roles)
	sortObjects(r.out.RoleBindings)
	opts.Memo.rotate()
	if p := opts.Previous; p != nil {
		r.out.Secrets = reuse(r.out.Secrets, p.Secrets)
		r.out.Roles = reuse(r.out.Roles, p.Roles)
		r.out.RoleBindings = reuse(r.out.RoleBindings, p.RoleBindings)
	}
	return r.out
}

type renderer struct {
	in      Input
	opts    Options
	out     *Result
	claimed map[objectKey]string // rendered so far → "TrustAnchor <ns>/<name>"

	// Lookups by name and by namespace, made once a Render: a TrustAnchor looks up several
	// objects, and scanning every Secret of the cluster for each of a thousand TrustAnchors
	// made a change quadratic in the number of tenants.
	secrets        map[[2]string]*corev1.Secret
	roles          map[[2]string]*rbacv1.Role
	bindings       map[[2]string]*rbacv1.RoleBinding
	secretsNS      map[string][]*corev1.Secret
	bindingsNS     map[string][]*rbacv1.RoleBinding
	prevSecretsNS  map[string][]*corev1.Secret
	prevBindingsNS map[string][]*rbacv1.RoleBinding
	prevAnchors    map[[2]string]int
}

func (r *renderer) index() {
	r.secrets, r.roles, r.bindings = byName(r.in.Secrets), byName(r.in.Roles), byName(r.in.RoleBindings)
	r.secretsNS, r.bindingsNS = byNamespace(r.in.Secrets), byNamespace(r.in.RoleBindings)
	if p := r.opts.Previous; p != nil {
		r.prevSecretsNS, r.prevBindingsNS = byNamespace(p.Secrets), byNamespace(p.RoleBindings)
		r.prevAnchors = make(map[[2]string]int, len(p.Anchors))
		for i, a := range p.Anchors {
			r.prevAnchors[[2]string{a.Namespace, a.Name}] = i
		}
	}
}

func byName[T metav1.Object](objs []T) map[[2]string]T {
	m := make(map[[2]string]T, len(objs))
	for _, o := range objs {
		k := [2]string{o.GetNamespace(), o.GetName()}
		if _, dup := m[k]; !dup { // the first, as a scan would find
			m[k] = o
		}
	}
	return m
}

func byNamespace[T metav1.Object](objs []T) map[string][]T {
	m := map[string][]T{}
	for _, o := range objs {
		m[o.GetNamespace()] = append(m[o.GetNamespace()], o)
	}
	return m
}

type objectKey struct{ kind, namespace, name string }

// projection is what a TrustAnchor publishes: the release naming the objects, the bundle,
// which of its CAs are kept from before a rotation, and the readers.
type projection struct {
	release  string
	certs    []*x509.Certificate
	previous map[string]bool // sha256 → kept from before a rotation
	readers  []rbacv1.Subject
}

// anchor renders one TrustAnchor, or its previous projection when it cannot.
func (r *renderer) anchor(src *v1alpha1.TrustAnchor) {
	t := src.DeepCopy() // defaults are applied to a copy: inputs are never changed
	t.Default()
	st := &Anchor{Namespace: t.Namespace, Name: t.Name}
	st.Status.ObservedGeneration = t.Generation
	ready := func(ok bool, reason, msg string) {
		conditions.Set(&st.Status.Conditions, src.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionReady, Status: conditions.Status(ok), Reason: reason, Message: msg, ObservedGeneration: t.Generation,
		}, r.opts.Now)
	}
	prev := r.previous(src, t)
	keepPrevious := func(reason, msg string, specValid bool) {
		if prev != nil && specValid {
			prev.readers = t.Spec.Readers // who may read follows the spec: a removed reader loses the grant
		}
		ready(false, reason, msg+r.keep(t, prev, st))
		r.out.Anchors = append(r.out.Anchors, *st)
	}

	if errs := t.Validate(); len(errs) > 0 {
		keepPrevious(v1alpha1.ReasonInvalid, errs.ToAggregate().Error(), false)
		return
	}
	release := cmp.Or(t.Spec.Release, t.Name)
	if msgs := r.collisions(t, release, len(t.Spec.Readers) > 0, st); len(msgs) > 0 {
		keepPrevious(v1alpha1.ReasonNameCollision, strings.Join(msgs, "; "), true)
		return
	}
	ref := t.Spec.SourceSecretRef
	source := fmt.Sprintf("Secret %s/%s", t.Namespace, ref.Name)
	s := r.secret(t.Namespace, ref.Name)
	if s == nil {
		keepPrevious(v1alpha1.ReasonSourceNotFound, "spec.sourceSecretRef: "+source+" not found", true)
		return
	}
	data, ok := s.Data[ref.Key]
	if !ok {
		keepPrevious(v1alpha1.ReasonSourceNotFound, fmt.Sprintf("spec.sourceSecretRef: %s has no key %q (its keys: %s)", source, ref.Key, keys(s.Data)), true)
		return
	}
	certs, reason, msg := r.opts.Memo.guard(data)
	if reason != "" {
		msg = fmt.Sprintf("spec.sourceSecretRef: %s key %q: %s", source, ref.Key, msg)
		if reason == v1alpha1.ReasonContainsPrivateKey {
			warn(st, reason, msg+": nothing of it is published")
		}
		keepPrevious(reason, msg, true)
		return
	}

	p := &projection{release: release, readers: t.Spec.Readers, previous: map[string]bool{}}
	seen := map[string]bool{}
	for _, c := range certs {
		if fp := fingerprint(c); !seen[fp] {
			seen[fp] = true
			p.certs = append(p.certs, c)
		}
	}
	fromSource := len(p.certs)
	var rotated []string
	if prev != nil {
		for _, c := range prev.certs {
			if fp := fingerprint(c); !seen[fp] && r.inUse(t, c) {
				seen[fp], p.previous[fp] = true, true
				p.certs = append(p.certs, c)
				rotated = append(rotated, fmt.Sprintf("%q", c.Subject.String()))
			}
		}
	}
	r.publish(t, p, st)
	msg = fmt.Sprintf("published %s of %s key %q in Secret %s/%s, for %s", countCAs(fromSource), source, ref.Key,
		t.Namespace, SecretName(release), countReaders(len(t.Spec.Readers)))
	if len(rotated) > 0 {
		msg += fmt.Sprintf("; kept from before a rotation while a backend still serves a chain from it: %s", strings.Join(rotated, ", "))
	}
	if n := len(p.certs); n > MaxListed {
		msg += fmt.Sprintf("; status lists the first %d of the bundle's %d certificates", MaxListed, n)
	}
	ready(true, v1alpha1.ReasonPublished, msg)
	st.Rendered = true
	r.out.Anchors = append(r.out.Anchors, *st)
}

// warn adds a Warning to st, once per message.
func warn(st *Anchor, reason, msg string) {
	w := Warning{Reason: reason, Message: msg}
	if !slices.Contains(st.Warnings, w) {
		st.Warnings = append(st.Warnings, w)
	}
}

// collisions names every object at a name t would render (its Secret, and its Role and
// RoleBinding when it has readers) that t does not control, or that another TrustAnchor
// renders in this call, and warns of each. Such an object is never overwritten.
func (r *renderer) collisions(t *v1alpha1.TrustAnchor, release string, grants bool, st *Anchor) []string {
	var msgs []string
	check := func(kind, name string) {
		if msg := r.taken(t, kind, name); msg != "" {
			msgs = append(msgs, msg)
			warn(st, v1alpha1.ReasonNameCollision, msg)
		}
	}
	check("Secret", SecretName(release))
	if grants {
		check("Role", ReaderName(release))
		check("RoleBinding", ReaderName(release))
	}
	return msgs
}

// taken says why t cannot render the object kind/name in its namespace, or "": another
// TrustAnchor renders it in this call, or an object t does not control exists there.
func (r *renderer) taken(t *v1alpha1.TrustAnchor, kind, name string) string {
	if by := r.claimed[objectKey{kind, t.Namespace, name}]; by != "" {
		return fmt.Sprintf("%s %s/%s is rendered by %s: TrustAnchors of one namespace need different spec.release", kind, t.Namespace, name, by)
	}
	var o metav1.Object
	switch kind {
	case "Secret":
		o = asObject(r.secret(t.Namespace, name))
	case "Role":
		o = asObject(r.roles[[2]string{t.Namespace, name}])
	case "RoleBinding":
		o = asObject(r.bindings[[2]string{t.Namespace, name}])
	}
	if o != nil && !controlledBy(o, t) {
		return fmt.Sprintf("%s %s/%s exists and is not this TrustAnchor's: it is never overwritten; delete it or choose another spec.release", kind, t.Namespace, name)
	}
	return ""
}

// keep renders the previous projection p of a TrustAnchor that cannot publish its source,
// as far as its names are free, and returns what the Ready message adds about it. Never an
// object at a name another object holds, and never a grant without what it grants: with
// the Secret's name taken nothing is kept (the Role would let the readers get the foreign
// Secret); with the Role's or RoleBinding's taken, the Secret stays for the clients that
// already hold it and the grant goes (a RoleBinding bound to a foreign Role would give the
// readers whatever that Role allows).
func (r *renderer) keep(t *v1alpha1.TrustAnchor, p *projection, st *Anchor) string {
	if p == nil {
		return "; nothing is published"
	}
	secret, reader := SecretName(p.release), ReaderName(p.release)
	// why names the object that holds a name, unless a Warning of this call already does.
	why := func(msg string) string {
		w := Warning{Reason: v1alpha1.ReasonNameCollision, Message: msg}
		if slices.Contains(st.Warnings, w) {
			return ""
		}
		st.Warnings = append(st.Warnings, w)
		return " (" + msg + ")"
	}
	if msg := r.taken(t, "Secret", secret); msg != "" {
		return fmt.Sprintf("; nothing is published, and the readers' grant is withdrawn: the previous Secret %s/%s is not this TrustAnchor's any more%s", t.Namespace, secret, why(msg))
	}
	kept := *p
	note := ""
	if len(kept.readers) > 0 {
		for _, kind := range []string{"Role", "RoleBinding"} {
			if msg := r.taken(t, kind, reader); msg != "" {
				kept.readers = nil
				note = "; the readers' grant is withdrawn" + why(msg)
				break
			}
		}
	}
	r.publish(t, &kept, st)
	return fmt.Sprintf("; the previous bundle (%s) stays published in Secret %s/%s", countCAs(len(kept.certs)), t.Namespace, secret) + note
}

// publish adds p's objects to the result, and its Secret and bundle to st's status.
func (r *renderer) publish(t *v1alpha1.TrustAnchor, p *projection, st *Anchor) {
	by := "TrustAnchor " + t.Namespace + "/" + t.Name
	secret, reader := SecretName(p.release), ReaderName(p.release)
	r.out.Secrets = append(r.out.Secrets, &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(t, secret),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{BundleKey: Bundle(p.certs)},
	})
	r.claimed[objectKey{"Secret", t.Namespace, secret}] = by
	if len(p.readers) > 0 {
		r.out.Roles = append(r.out.Roles, &rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
			ObjectMeta: objectMeta(t, reader),
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get"},
			}},
		})
		r.out.RoleBindings = append(r.out.RoleBindings, &rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: objectMeta(t, reader),
			Subjects:   subjects(p.readers, t.Namespace),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: reader},
		})
		r.claimed[objectKey{"Role", t.Namespace, reader}] = by
		r.claimed[objectKey{"RoleBinding", t.Namespace, reader}] = by
	}
	st.Status.SecretName = secret
	st.Status.Certificates = nil
	for _, c := range p.certs {
		if len(st.Status.Certificates) == MaxListed {
			break
		}
		st.Status.Certificates = append(st.Status.Certificates, v1alpha1.PublishedCA{
			Subject: c.Subject.String(), SHA256: fingerprint(c), NotAfter: metav1.NewTime(c.NotAfter.UTC()), Previous: p.previous[fingerprint(c)],
		})
	}
}

// previous is t's previous projection: Options.Previous's objects for it when that holds
// t, else (after a restart) the objects t controls in Input. The bundle goes through the
// Guard again, and the readers are the previous RoleBinding's; nil when nothing usable.
func (r *renderer) previous(src, t *v1alpha1.TrustAnchor) *projection {
	var secrets []*corev1.Secret
	var bindings []*rbacv1.RoleBinding
	var listed []v1alpha1.PublishedCA
	if pa := r.previousAnchor(t); pa != nil {
		mine := func(o metav1.Object) bool {
			return o.GetNamespace() == t.Namespace && o.GetLabels()[LabelTrustAnchor] == t.Name && (t.UID == "" || controlledBy(o, t))
		}
		secrets, bindings, listed = filter(r.prevSecretsNS[t.Namespace], mine), filter(r.prevBindingsNS[t.Namespace], mine), pa.Status.Certificates
	} else {
		mine := func(o metav1.Object) bool {
			return o.GetNamespace() == t.Namespace && o.GetLabels()[LabelTrustAnchor] == t.Name && controlledBy(o, t)
		}
		secrets, bindings, listed = filter(r.secretsNS[t.Namespace], mine), filter(r.bindingsNS[t.Namespace], mine), src.Status.Certificates
	}
	// One release at a time; during a change of spec.release the current one's first.
	want := SecretName(cmp.Or(t.Spec.Release, t.Name))
	slices.SortStableFunc(secrets, func(a, b *corev1.Secret) int {
		return cmp.Or(-cmpBool(a.Name == want, b.Name == want), strings.Compare(a.Name, b.Name))
	})
	for _, s := range secrets {
		release, ok := strings.CutSuffix(s.Name, SecretName(""))
		if !ok {
			continue
		}
		certs, reason, _ := r.opts.Memo.guard(s.Data[BundleKey])
		if reason != "" {
			continue
		}
		p := &projection{release: release, certs: certs, previous: map[string]bool{}}
		for _, l := range listed {
			if l.Previous {
				p.previous[l.SHA256] = true
			}
		}
		for _, b := range bindings {
			if b.Name == ReaderName(release) {
				p.readers = b.Subjects
			}
		}
		return p
	}
	return nil
}

func (r *renderer) previousAnchor(t *v1alpha1.TrustAnchor) *Anchor {
	if r.opts.Previous == nil {
		return nil
	}
	if i, ok := r.prevAnchors[[2]string{t.Namespace, t.Name}]; ok {
		return &r.opts.Previous.Anchors[i]
	}
	return nil
}

// inUse reports whether a backend of t serves a chain from ca (see Options.InUse).
func (r *renderer) inUse(t *v1alpha1.TrustAnchor, ca *x509.Certificate) bool {
	if r.opts.InUse == nil {
		return true
	}
	for _, c := range r.opts.InUse[types.NamespacedName{Namespace: t.Namespace, Name: t.Name}] {
		if c == nil {
			continue
		}
		if bytes.Equal(c.Raw, ca.Raw) || bytes.Equal(c.RawIssuer, ca.RawSubject) && c.CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}

func (r *renderer) secret(ns, name string) *corev1.Secret { return r.secrets[[2]string{ns, name}] }

// objectMeta is the metadata of every rendered object: t's namespace, its label and, when t has a
// UID (it was read from a cluster), t as controller. An owner reference without a UID is
// refused by the API server, so objects rendered from files carry the label alone.
func objectMeta(t *v1alpha1.TrustAnchor, name string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: t.Namespace, Labels: map[string]string{LabelTrustAnchor: t.Name}}
	if t.UID != "" {
		yes := true
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "TrustAnchor", Name: t.Name, UID: t.UID,
			Controller: &yes, BlockOwnerDeletion: &yes,
		}}
	}
	return m
}

// controlledBy reports whether o's controller is t (by UID when t has one, as in a cluster).
func controlledBy(o metav1.Object, t *v1alpha1.TrustAnchor) bool {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "TrustAnchor" || ref.Name != t.Name {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == v1alpha1.GroupVersion.Group && (t.UID == "" || ref.UID == t.UID)
}

// subjects are the readers as a RoleBinding needs them: User and Group in the RBAC API
// group, a ServiceAccount in the core group and, when it names none, in ns.
func subjects(readers []rbacv1.Subject, ns string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, len(readers))
	for i, s := range readers {
		switch s.Kind {
		case rbacv1.UserKind, rbacv1.GroupKind:
			s.APIGroup = cmp.Or(s.APIGroup, rbacv1.GroupName)
		case rbacv1.ServiceAccountKind:
			s.Namespace = cmp.Or(s.Namespace, ns)
		}
		out[i] = s
	}
	return out
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

func keys(m map[string][]byte) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

func countCAs(n int) string {
	if n == 1 {
		return "1 CA certificate"
	}
	return fmt.Sprintf("%d CA certificates", n)
}

func countReaders(n int) string {
	switch n {
	case 0:
		return "no readers (spec.readers is empty)"
	case 1:
		return "1 reader"
	}
	return fmt.Sprintf("%d readers", n)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// asObject turns a typed nil into an untyped one.
func asObject[T metav1.Object](o T) metav1.Object {
	var zero T
	if any(o) == any(zero) {
		return nil
	}
	return o
}

func filter[T metav1.Object](objs []T, keep func(metav1.Object) bool) []T {
	var out []T
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

func sortObjects[T metav1.Object](objs []T) {
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
	})
}

// reuse replaces each object of objs equal to one of prev (same namespace and name, equal
// content) by that one.
func reuse[T metav1.Object](objs, prev []T) []T {
	byKey := make(map[[2]string]T, len(prev))
	for _, p := range prev {
		byKey[[2]string{p.GetNamespace(), p.GetName()}] = p
	}
	for i, o := range objs {
		// Both are this package's own output (never decoded from the API server): reflect's
		// equality is exact for them, and several times faster than the semantic one on a
		// thousand Secrets a change.
		if p, ok := byKey[[2]string{o.GetNamespace(), o.GetName()}]; ok && reflect.DeepEqual(o, p) {
			objs[i] = p
		}
	}
	return objs
}
