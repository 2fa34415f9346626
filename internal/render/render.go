// Package render is the tenant stage of snigate's pipeline: a pure function from
// TenantGateways (and the Namespaces, routes, Secrets and Gateways around them) to the
// Gateway API and cert-manager objects that serve them, and each TenantGateway's status.
// It does no I/O, like translate: the runner merges the rendered Gateway API objects into
// translate's input (standalone), or a controller applies them (cluster).
//
//	out := render.Render(res, render.Options{Now: now})
//	res = out.Merge(res)              // resources + rendered Gateways and HTTPRoutes
//	tr := translate.Translate(res, …)
//	render.Complete(out, tr.Status)   // listeners' attached routes, Ready
//
// What one TenantGateway <t> in namespace <ns> with apex <apex> renders (docs/tenants.md):
//   - Gateway <t>, class spec.gatewayClassName, labelled snigate.dev/tenant-gateway=<t> and
//     owned by the TenantGateway (controller ownerRef), with the listeners
//     http (80: routes from <ns> and cert-manager's namespace only: the redirect and the
//     HTTP-01 solvers, no app serves plaintext); https-* on 443 (one per HTTPRoute hostname
//     in http01 mode; https (*.<apex>), https-apex and one per inheriting child apex
//     otherwise); tls-<svc> on 443 (TLS Passthrough, <svc>.<apex>); tls-<name> on each
//     passthrough listener's own port (routes from <ns> only);
//   - HTTPRoute <t>-http-redirect on http: <apex> and *.<apex>, 301 to https. Its one rule
//     matches every path by prefix "/", so the exact-path challenge routes of cert-manager
//     take precedence (the Gateway API's longest-match rule);
//   - per certificate mode: http01, an ACME Issuer <t>-acme (unless issuerRef names one) and
//     one Certificate per HTTPS hostname, never for a TLSRoute hostname, which the backend
//     terminates; dns01, an Issuer with spec.certificates.dns01 as its solver and one
//     Certificate <t>-wildcard covering the apex, *.<apex> and each child's *.<child apex>;
//     existingSecret, nothing (the HTTPS listeners serve the named Secret).
//
// DatabaseExposures publish through their namespace's TenantGateway (databases.go): one
// shared listener per engine and port (tls-<engine>, created with the first exposure and
// removed with the last), one TLSRoute per release owned by its exposure (a TCP listener and
// TCPRoute for a server-speaks-first engine with a port), conflicts decided by age, and each
// exposure's status with the certificate probe's verdict from Options.Probes. ProbeTargets
// says what that probe connects to: every ready endpoint of each route. A clustered
// database's spec.members get hostnames and a TLSRoute each on the exposure's listener
// (members.go).
//
// The tenant tree of <t> is <ns>, every namespace labelled snigate.dev/gateway=<ns> (a child,
// whose own apex is its snigate.dev/host label) and spec.attachedNamespaces. Routes of the
// tree attach to the Gateway; the tree is written into the listeners' allowedRoutes as a list
// of namespace names, so a namespace leaving the tree loses its routes at the next render.
//
// Bad input never breaks what runs: a TenantGateway whose spec is invalid, whose entries
// overlap, whose listeners exceed a Gateway's 64, whose wildcard Secret is missing or not a
// kubernetes.io/tls Secret, or one of whose object names (Gateway, redirect, Issuer,
// Certificate) is taken by an object it does not own, renders nothing new:
// Options.Previous's objects for it are rendered again (the previous Gateway keeps serving)
// and the status says why.
package render

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/conditions"
	"github.com/snigate/snigate/internal/resources"
	"github.com/snigate/snigate/internal/translate"
)

// Labels and limits of the tenant model.
const (
	// LabelTenantGateway marks every rendered object with its TenantGateway's name.
	LabelTenantGateway = "snigate.dev/tenant-gateway"
	// LabelGateway on a Namespace names the namespace of the TenantGateway whose tree it is in.
	LabelGateway = "snigate.dev/gateway"
	// LabelHost on a Namespace is its apex.
	LabelHost = "snigate.dev/host"
	// AnnotationExternalDNSHostname on a rendered TCPRoute lists its exposure's hostnames.
	// A TCPRoute has no hostnames of its own (its port routes it), so this annotation is
	// the only place external-dns's gateway-tcproute source can read them from
	// (docs/databases.md, DNS). external-dns reads this key since v0.22.0 and the legacy
	// one before (v0.23.0 reads it only with --enable-legacy-annotation-prefix): a route
	// carries both, so any version finds its names.
	AnnotationExternalDNSHostname       = "external-dns.kubernetes.io/hostname"
	AnnotationExternalDNSHostnameLegacy = "external-dns.alpha.kubernetes.io/hostname"

	// MaxListeners is a Gateway's listener cap (Gateway API: spec.listeners maxItems 64).
	MaxListeners = 64
	// NearLimit is the listener count from which ListenerBudget warns.
	NearLimit = 57
)

// Options configures Render.
type Options struct {
	// Now stamps LastTransitionTime of new conditions (default metav1.Now).
	Now func() metav1.Time
	// CertManager says cert-manager serves this cluster: without it (standalone mode) the
	// HTTPS listeners of http01 and dns01 modes are not ready, reason
	// CertificatesNeedCluster.
	CertManager bool
	// NoCertManagerReason is the listener reason without CertManager (default
	// CertificatesNeedCluster; in a cluster lacking cert-manager's CRDs,
	// CertManagerNotInstalled).
	NoCertManagerReason string
	// CertManagerNamespace may attach routes to the http listener (HTTP-01 solvers);
	// default "cert-manager".
	CertManagerNamespace string
	// Previous is the last result; its objects for a TenantGateway are rendered again when
	// the TenantGateway's new input cannot be (see the package doc). It also carries the
	// memos that spare a render the work of what did not change: per TenantGateway and per
	// exposure, checked against what they read (tenantmemo.go, exposurememo.go, reads.go). Render never writes it,
	// and the result shares no status with it: the serving state that holds it may be read
	// while the next result is built and completed.
	Previous *Result
	// Issuers and Certificates are the cert-manager objects that exist (a cluster's): one
	// at a name the TenantGateway would render and does not own is never overwritten, the
	// TenantGateway says NameInUse instead, as for its Gateway and redirect.
	Issuers      []*cmv1.Issuer
	Certificates []*cmv1.Certificate
	// Probes are the latest certificate probes of the DatabaseExposures, by namespace and
	// name: their verdicts become CertificateVerified. A map once given is not changed: a
	// VerdictCache gives the same map again only while no verdict changed, and a render
	// with Previous takes the same map for the same verdicts (verdicts.go).
	Probes map[[2]string]Probe
}

// Result is what Render made.
type Result struct {
	Gateways []*gwv1.Gateway
	// ListenerSets are the TenantGateways with spec.parentGatewayRef: their listeners on a
	// shared Gateway, in place of a Gateway of their own.
	ListenerSets []*gwv1.ListenerSet
	HTTPRoutes   []*gwv1.HTTPRoute
	// TLSRoutes and TCPRoutes are the DatabaseExposures' routes.
	TLSRoutes []*gwv1.TLSRoute
	TCPRoutes []*gwv1.TCPRoute
	// AccessPolicies are the DatabaseExposures' and TenantGateways' spec.access (access.go).
	AccessPolicies []*v1alpha1.AccessPolicy
	Issuers        []*cmv1.Issuer
	Certificates   []*cmv1.Certificate
	// Secrets are the wildcard Secrets the existingSecret Gateways serve: the current one,
	// or the last good one while the current is missing or invalid (Merge puts them in
	// place of what the input holds, so the previous Gateway keeps its certificate).
	Secrets []*corev1.Secret
	// Tenants holds the status of every TenantGateway, in namespace/name order.
	Tenants []Tenant
	// Exposures holds the status of every DatabaseExposure, in namespace/name order.
	Exposures []Exposure
	// CertificateNames are, per cert-manager Certificate an exposure names, the hostnames
	// to add to its dnsNames (namespace/name order; a cluster's controller applies them).
	CertificateNames []CertificateNames

	// memo is what the next render, given this one as Previous, takes over instead of
	// doing the same work again (memo.go).
	memo *memo
}

// Tenant is one TenantGateway's status, and the Gateway rendered for it (nil when none).
type Tenant struct {
	Namespace string                       `json:"namespace"`
	Name      string                       `json:"name"`
	Status    v1alpha1.TenantGatewayStatus `json:"status"`
	// Rendered is true when this call rendered the TenantGateway anew; false when it
	// rendered nothing, or its previous objects again (what it owns must then stay).
	Rendered bool `json:"-"`
	// listeners by name, for Complete: which are held not ready by render.
	held   map[string]string  // listener name → reason
	stored []metav1.Condition // the conditions the input object carried
	gw     *gwv1.Gateway
	set    *gwv1.ListenerSet // in place of gw, with spec.parentGatewayRef
	secret *corev1.Secret    // the wildcard Secret served (existingSecret mode)
}

// Render renders every TenantGateway of in.
func Render(in *resources.Resources, opts Options) *Result {
	if opts.Now == nil {
		opts.Now = metav1.Now
	}
	if opts.CertManagerNamespace == "" {
		opts.CertManagerNamespace = "cert-manager"
	}
	if opts.NoCertManagerReason == "" {
		opts.NoCertManagerReason = v1alpha1.ReasonCertificatesNeedCluster
	}
	r := &renderer{in: in, opts: opts, idx: newIndex(in, opts), certNames: map[nsName][]string{},
		recipes: make(map[nsName]routeRecipe, len(in.DatabaseExposures))}
	if opts.Previous != nil && opts.Previous.memo != nil {
		r.prev = opts.Previous.memo
	} else {
		r.prev = newMemo()
	}
	// Sized once: an Exposure is large, and there may be 10 000.
	r.out = &Result{memo: sizedMemo(r.prev, len(in.DatabaseExposures)), Exposures: make([]Exposure, 0, len(in.DatabaseExposures)), TLSRoutes: make([]*gwv1.TLSRoute, 0, len(in.DatabaseExposures))}
	r.changes = changesSince(r.prev, in, opts)
	r.out.memo.in, r.out.memo.issuers, r.out.memo.certificates, r.out.memo.probes = in, opts.Issuers, opts.Certificates, opts.Probes
	tgws := slices.Clone(in.TenantGateways)
	// At most one TenantGateway per namespace: the oldest wins, then the name.
	slices.SortFunc(tgws, func(a, b *v1alpha1.TenantGateway) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	winner := map[string]*v1alpha1.TenantGateway{}
	for _, t := range tgws {
		if w := winner[t.Namespace]; w != nil {
			r.refuse(t, v1alpha1.ReasonDuplicate, fmt.Sprintf("TenantGateway %s/%s is this namespace's TenantGateway: a namespace has at most one", w.Namespace, w.Name))
			continue
		}
		winner[t.Namespace] = t
	}
	r.assignExposures(winner)
	for _, ns := range sortedKeys(winner) {
		r.tenant(winner[ns])
	}
	r.sharedBudgets()
	r.out.CertificateNames = r.certificateNames()
	slices.SortFunc(r.out.Tenants, func(a, b Tenant) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for i := range r.out.Tenants {
		sortConditions(r.out.Tenants[i].Status.Conditions)
	}
	r.out.Exposures = sortExposures(r.out.Exposures)
	for i := range r.out.Exposures {
		sortConditions(r.out.Exposures[i].Status.Conditions)
	}
	// An object rendered the same as last time is the same pointer: the contract of package
	// resources, on which translate's memo relies. A new one is stamped (AnnotationRendered).
	p := opts.Previous
	if p == nil {
		p = &Result{}
	}
	r.out.Gateways = reuse(r.out.Gateways, p.Gateways)
	r.out.ListenerSets = reuse(r.out.ListenerSets, p.ListenerSets)
	r.out.HTTPRoutes = reuse(r.out.HTTPRoutes, p.HTTPRoutes)
	r.out.TLSRoutes = reuse(r.out.TLSRoutes, p.TLSRoutes)
	r.out.TCPRoutes = reuse(r.out.TCPRoutes, p.TCPRoutes)
	r.out.AccessPolicies = reuse(r.out.AccessPolicies, p.AccessPolicies)
	r.out.Issuers = reuse(r.out.Issuers, p.Issuers)
	r.out.Certificates = reuse(r.out.Certificates, p.Certificates)
	r.keepTenants()
	for _, tr := range r.out.TLSRoutes {
		if rc, ok := r.recipes[keyOf(tr)]; ok && rc.protocol == gwv1.TLSProtocolType {
			r.keepRoute(keyOf(tr), routeMemo{recipe: rc, tls: tr})
		}
	}
	for _, tr := range r.out.TCPRoutes {
		if rc, ok := r.recipes[keyOf(tr)]; ok && rc.protocol == gwv1.TCPProtocolType {
			r.keepRoute(keyOf(tr), routeMemo{recipe: rc, tcp: tr})
		}
	}
	if opts.Previous != nil {
		gws, sets := byName(r.out.Gateways), byName(r.out.ListenerSets)
		for i := range r.out.Tenants {
			if g := r.out.Tenants[i].gw; g != nil && gws[keyOf(g)] != nil {
				r.out.Tenants[i].gw = gws[keyOf(g)]
			}
			if ls := r.out.Tenants[i].set; ls != nil && sets[keyOf(ls)] != nil {
				r.out.Tenants[i].set = sets[keyOf(ls)]
			}
		}
	}
	return r.out
}

// sortExposures puts xs in namespace/name order. Most often they are already (tenants are
// rendered in namespace order, each one's exposures in theirs): a check then, no copy.
// Otherwise they are sorted through their indexes: an Exposure is large, and moving 10 000
// of them about in a sort cost more than building them.
func sortExposures(xs []Exposure) []Exposure {
	compare := func(a, b *Exposure) int {
		return resources.CompareNames(a.Namespace, a.Name, b.Namespace, b.Name)
	}
	inOrder := true
	for i := 1; i < len(xs) && inOrder; i++ {
		inOrder = compare(&xs[i-1], &xs[i]) <= 0
	}
	if inOrder {
		return xs
	}
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return compare(&xs[i], &xs[j]) })
	sorted := make([]Exposure, len(order))
	for i, j := range order {
		sorted[i] = xs[j]
	}
	return sorted
}

type renderer struct {
	in   *resources.Resources
	opts Options
	out  *Result
	idx  *index
	// certNames are the hostnames each cert-manager Certificate must carry
	// (Result.CertificateNames), gathered as exposures are rendered.
	certNames map[nsName][]string
	// prev is the previous render's memo (empty without one); recipes are this render's
	// routes' (memo.go).
	prev    *memo
	recipes map[nsName]routeRecipe
	// changes are the names whose objects changed since prev's input (changes.go).
	changes changes
	// exposures are the accepted-so-far DatabaseExposures of each TenantGateway
	// (namespace, name), defaulted.
	exposures map[[2]string][]exposureInput
	// rec records what the TenantGateway being rendered reads (nil between them); fresh are
	// the tenants rendered anew (tenantmemo.go).
	rec   *recording
	fresh []fresh
	// freshExposures are the exposures rendered anew (exposurememo.go).
	freshExposures []*exposureMemo
}

// renderTenant renders one TenantGateway, or its previous objects when it cannot.
func (r *renderer) renderTenant(src *v1alpha1.TenantGateway) {
	t := src.DeepCopy() // defaults are applied to a copy: inputs are never changed
	t.Default()
	st := &Tenant{Namespace: t.Namespace, Name: t.Name, held: map[string]string{}, stored: src.Status.Conditions}
	st.Status.ObservedGeneration = t.Generation
	st.Status.GatewayRef = &v1alpha1.GatewayRef{Name: t.Name, Namespace: t.Namespace}
	if ref := t.Spec.ParentGatewayRef; ref != nil {
		// The Gateway its listeners are on: the shared one.
		st.Status.GatewayRef = &v1alpha1.GatewayRef{Name: ref.Name, Namespace: ref.Namespace}
	}
	cond := func(typ string, ok bool, reason, msg string) {
		conditions.Set(&st.Status.Conditions, src.Status.Conditions, metav1.Condition{
			Type: typ, Status: conditions.Status(ok), Reason: reason, Message: msg, ObservedGeneration: t.Generation,
		}, r.opts.Now)
	}
	keepPrevious := func(typ, reason, msg string) {
		if typ == v1alpha1.ConditionAccepted {
			cond(v1alpha1.ConditionAccepted, false, reason, msg)
			cond(v1alpha1.ConditionReady, false, reason, "nothing new rendered: "+msg)
		} else {
			cond(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, "the spec is valid")
			cond(v1alpha1.ConditionReady, false, reason, msg)
		}
		r.previous(t, st)
		r.previousExposures(t, reason, msg)
		r.out.Tenants = append(r.out.Tenants, *st)
	}

	if errs := t.Validate(); len(errs) > 0 {
		keepPrevious(v1alpha1.ConditionAccepted, v1alpha1.ReasonInvalid, errs.ToAggregate().Error())
		return
	}
	if msg := overlaps(t); msg != "" {
		keepPrevious(v1alpha1.ConditionAccepted, v1alpha1.ReasonHostnameOverlap, msg)
		return
	}
	if msg := r.nameInUse(t); msg != "" {
		keepPrevious(v1alpha1.ConditionReady, v1alpha1.ReasonNameInUse, msg)
		return
	}
	tree := r.tree(t)
	b := &build{r: r, t: t, st: st, tree: tree}
	b.listeners()
	b.databases()
	n := len(b.gw.Spec.Listeners)
	st.Status.ListenerCount = int32(n)
	of := "a Gateway's"
	if t.Spec.ParentGatewayRef != nil {
		of = "a ListenerSet's"
	}
	// On a shared Gateway, sharedBudgets adds the Gateway's count once every set is known.
	if n >= NearLimit {
		cond(v1alpha1.ConditionListenerBudget, false, v1alpha1.ReasonNearLimit, fmt.Sprintf(
			"%d of %s %d listeners: each HTTPS hostname of http01 mode takes one; mode dns01 or existingSecret serves every hostname of the tenant with one wildcard listener", n, of, MaxListeners))
	} else {
		cond(v1alpha1.ConditionListenerBudget, true, v1alpha1.ReasonWithinBudget, fmt.Sprintf("%d of %s %d listeners", n, of, MaxListeners))
	}
	if n > MaxListeners {
		keepPrevious(v1alpha1.ConditionReady, v1alpha1.ReasonTooManyListeners, fmt.Sprintf(
			"the spec and its routes need %d listeners, more than a Gateway's %d: the previous Gateway stays", n, MaxListeners))
		return
	}
	secret, reason, msg := r.wildcardSecret(t)
	// Without the ReferenceGrant the Gateway is rendered (its other listeners serve) and
	// its HTTPS listeners are held: translate refuses the reference too, so a revoked grant
	// stops new handshakes at once rather than keeping the previous Gateway's certificate.
	refused := ""
	if reason == v1alpha1.ReasonRefNotPermitted {
		refused, reason = msg, ""
	}
	if reason != "" {
		keepPrevious(v1alpha1.ConditionReady, reason, msg)
		return
	}
	b.redirect()
	b.certificates()
	b.tenantAccess()
	if msg := r.certificateNameInUse(t, b); msg != "" {
		keepPrevious(v1alpha1.ConditionReady, v1alpha1.ReasonNameInUse, msg)
		return
	}
	if secret != nil {
		st.secret = secret
		r.out.Secrets = append(r.out.Secrets, secret)
	}
	cond(v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted, "the spec is valid")
	if refused != "" {
		for _, h := range b.https {
			st.held[h.name] = v1alpha1.ReasonRefNotPermitted
		}
		cond(v1alpha1.ConditionReady, false, v1alpha1.ReasonRefNotPermitted, refused)
	} else {
		cond(v1alpha1.ConditionReady, false, v1alpha1.ReasonPending, "waiting for the Gateway to be programmed")
	}
	st.Rendered = true
	st.Status.Listeners = b.listenerStatus()
	if t.Spec.ParentGatewayRef != nil {
		st.set = b.listenerSet()
		r.out.ListenerSets = append(r.out.ListenerSets, st.set)
	} else {
		st.gw = b.gw
		r.out.Gateways = append(r.out.Gateways, b.gw)
	}
	r.out.HTTPRoutes = append(r.out.HTTPRoutes, b.routes...)
	r.out.TLSRoutes = append(r.out.TLSRoutes, b.tlsRoutes...)
	r.out.TCPRoutes = append(r.out.TCPRoutes, b.tcpRoutes...)
	r.out.AccessPolicies = append(r.out.AccessPolicies, b.access...)
	r.out.Exposures = append(r.out.Exposures, b.exposureStatus...)
	r.addCertificateNames(b.certNames)
	r.out.Issuers = append(r.out.Issuers, b.issuers...)
	r.out.Certificates = append(r.out.Certificates, b.certs...)
	r.out.Tenants = append(r.out.Tenants, *st)
}

// sharedBudgets adds, to the ListenerBudget of every TenantGateway on a shared Gateway
// (spec.parentGatewayRef), the shared Gateway's count: its own listeners and those of every
// ListenerSet that names it (the TenantGateways' as rendered now, and the others of the
// input). From nine tenths of the Gateway's cap (translate.MaxListenersAnnotation), where
// translate refuses the youngest sets, the budget is NearLimit. Counting is all render does:
// translate decides which sets the Gateway takes.
func (r *renderer) sharedBudgets() {
	// The sets on each Gateway: those rendered now, and the input's others.
	rendered := byName(r.out.ListenerSets)
	on := map[nsName][]*gwv1.ListenerSet{}
	for _, ls := range r.out.ListenerSets {
		on[parentOf(ls)] = append(on[parentOf(ls)], ls)
	}
	for _, ls := range r.in.ListenerSets {
		if rendered[keyOf(ls)] == nil {
			on[parentOf(ls)] = append(on[parentOf(ls)], ls)
		}
	}
	type tally struct{ total, count int }
	tallies := map[nsName]tally{}
	for i := range r.out.Tenants {
		tn := &r.out.Tenants[i]
		if tn.set == nil {
			continue
		}
		c := meta.FindStatusCondition(tn.Status.Conditions, v1alpha1.ConditionListenerBudget)
		gw := r.idx.gateways.get(parentOf(tn.set))
		if c == nil || gw == nil || !translate.IsParent(tn.set, gw) {
			continue
		}
		tl, ok := tallies[keyOf(gw)]
		if !ok {
			tl.total = len(gw.Spec.Listeners)
			for _, ls := range on[keyOf(gw)] {
				if translate.IsParent(ls, gw) {
					tl.total += len(ls.Spec.Listeners)
					tl.count++
				}
			}
			tallies[keyOf(gw)] = tl
		}
		total, count := tl.total, tl.count
		next := *c
		next.Message += fmt.Sprintf("; the shared Gateway %s/%s has %d with its %d ListenerSets", gw.Namespace, gw.Name, total, count)
		if v, err := strconv.Atoi(strings.TrimSpace(gw.Annotations[translate.MaxListenersAnnotation])); err == nil && v > 0 {
			next.Message += fmt.Sprintf(", of at most %d (%s: beyond it the youngest ListenerSets are refused)", v, translate.MaxListenersAnnotation)
			if total*10 >= v*9 {
				next.Status, next.Reason = metav1.ConditionFalse, v1alpha1.ReasonNearLimit
			}
		}
		conditions.Set(&tn.Status.Conditions, tn.stored, next, r.opts.Now)
	}
}

// refuse records the status of a TenantGateway that renders nothing at all.
func (r *renderer) refuse(t *v1alpha1.TenantGateway, reason, msg string) {
	st := Tenant{Namespace: t.Namespace, Name: t.Name}
	st.Status.ObservedGeneration = t.Generation
	for _, typ := range []string{v1alpha1.ConditionAccepted, v1alpha1.ConditionReady} {
		conditions.Set(&st.Status.Conditions, t.Status.Conditions, metav1.Condition{
			Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: t.Generation,
		}, r.opts.Now)
	}
	r.out.Tenants = append(r.out.Tenants, st)
}

// previous renders again what the previous result held for t.
func (r *renderer) previous(t *v1alpha1.TenantGateway, st *Tenant) {
	p := r.opts.Previous
	if p == nil {
		return
	}
	mine := func(m metav1.Object) bool {
		return m.GetNamespace() == t.Namespace && m.GetLabels()[LabelTenantGateway] == t.Name
	}
	for _, g := range p.Gateways {
		if mine(g) {
			r.out.Gateways = append(r.out.Gateways, g)
			st.gw = g
		}
	}
	for _, ls := range p.ListenerSets {
		if mine(ls) {
			r.out.ListenerSets = append(r.out.ListenerSets, ls)
			st.set = ls
		}
	}
	for _, h := range p.HTTPRoutes {
		if mine(h) {
			r.out.HTTPRoutes = append(r.out.HTTPRoutes, h)
		}
	}
	for _, ap := range p.AccessPolicies {
		if mine(ap) && !exposurePolicy(ap) {
			r.out.AccessPolicies = append(r.out.AccessPolicies, ap)
		}
	}
	for _, i := range p.Issuers {
		if mine(i) {
			r.out.Issuers = append(r.out.Issuers, i)
		}
	}
	for _, c := range p.Certificates {
		if mine(c) {
			r.out.Certificates = append(r.out.Certificates, c)
		}
	}
	for _, pt := range p.Tenants {
		if pt.Namespace == t.Namespace && pt.Name == t.Name {
			// Copies, not the previous result's own: Complete writes the listeners of this
			// result while the previous one is still read (the admin server encodes the
			// serving status while the next load runs), and Render must leave Previous as it
			// was.
			st.Status.Listeners, st.Status.ListenerCount, st.held = slices.Clone(pt.Status.Listeners), pt.Status.ListenerCount, maps.Clone(pt.held)
			if pt.secret != nil {
				st.secret = pt.secret
				r.out.Secrets = append(r.out.Secrets, pt.secret)
			}
		}
	}
}

// wildcardSecret returns the existingSecret mode's Secret, or why it cannot serve.
func (r *renderer) wildcardSecret(t *v1alpha1.TenantGateway) (secret *corev1.Secret, reason, msg string) {
	c := t.Spec.Certificates
	if c.Mode != v1alpha1.CertificatesExistingSecret {
		return nil, "", ""
	}
	w := r.ask(question{kind: qWildcardSecret, key: nsName{wildcardNamespace(t), c.WildcardSecretRef.Name}, owner: nsName{namespace: t.Namespace}}).(wildcard)
	return w.secret, w.reason, w.msg
}

// wildcardSecretOf is wildcardSecret for Secret ns/name of a TenantGateway in namespace tns.
func (r *renderer) wildcardSecretOf(tns, ns, name string) (secret *corev1.Secret, reason, msg string) {
	if ns != tns && !r.granted(tns, ns, name) {
		// Checked before the Secret is looked at: without the grant nothing of it is used,
		// not even the last good copy.
		return nil, v1alpha1.ReasonRefNotPermitted, fmt.Sprintf(
			"spec.certificates.wildcardSecretRef: Secret %s/%s is in another namespace and no ReferenceGrant in %s allows Gateways from %s to reference it: the HTTPS listeners serve nothing",
			ns, name, ns, tns)
	}
	if s := r.idx.secrets.get(nsName{ns, name}); s != nil {
		if s.Type != corev1.SecretTypeTLS || len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
			return nil, v1alpha1.ReasonInvalidSecret, fmt.Sprintf("spec.certificates.wildcardSecretRef: Secret %s/%s is type %q; want %s with %s and %s",
				ns, name, s.Type, corev1.SecretTypeTLS, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		}
		return s, "", ""
	}
	return nil, v1alpha1.ReasonSecretNotFound, fmt.Sprintf("spec.certificates.wildcardSecretRef: Secret %s/%s not found", ns, name)
}

// wildcardNamespace is the namespace of the existingSecret mode's Secret.
func wildcardNamespace(t *v1alpha1.TenantGateway) string {
	if ref := t.Spec.Certificates.WildcardSecretRef; ref != nil && ref.Namespace != "" {
		return ref.Namespace
	}
	return t.Namespace
}

// listenerName is https-<first label>-<8 hex of sha256(hostname)>: unique per hostname,
// readable, and a valid section name ("wildcard" stands for a first label "*").
func listenerName(hostname string) string {
	first, _, _ := strings.Cut(hostname, ".")
	if first == "*" {
		first = "wildcard"
	}
	sum := sha256.Sum256([]byte(hostname))
	return "https-" + first + "-" + hex.EncodeToString(sum[:4])
}

func redirectName(t *v1alpha1.TenantGateway) string { return t.Name + "-http-redirect" }

// conditionOrder is the order conditions are listed in.
var conditionOrder = map[string]int{v1alpha1.ConditionAccepted: 0, v1alpha1.ConditionReady: 1, v1alpha1.ConditionListenerBudget: 2,
	v1alpha1.ConditionProgrammed: 1, v1alpha1.ConditionCertificateVerified: 2, v1alpha1.ConditionMembersAccepted: 3}

func sortConditions(c []metav1.Condition) {
	slices.SortStableFunc(c, func(a, b metav1.Condition) int { return conditionOrder[a.Type] - conditionOrder[b.Type] })
}

// reuse replaces each object of objs equal to one of prev (same namespace and name, equal
// content) by that one, and stamps the others (AnnotationRendered). An object kept from
// prev (a TenantGateway that renders nothing new) is prev's already.
func reuse[T metav1.Object](objs, prev []T) []T {
	byKey := make(map[[2]string]T, len(prev))
	for _, p := range prev {
		byKey[[2]string{p.GetNamespace(), p.GetName()}] = p
	}
	for i, o := range objs {
		p, ok := byKey[[2]string{o.GetNamespace(), o.GetName()}]
		if ok && any(p) == any(o) {
			continue
		}
		if ok && p.GetAnnotations()[AnnotationRendered] != "" {
			// Compared stamp and all: o is this render's own, free to change.
			setAnnotation(o, AnnotationRendered, p.GetAnnotations()[AnnotationRendered])
			if equality.Semantic.DeepEqual(o, p) {
				objs[i] = p
				continue
			}
		}
		stamp(o)
	}
	return objs
}
