package render

import (
	"slices"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// The per-tenant memo: a TenantGateway whose object, exposures and every answer its last
// render got (reads.go) are the same renders the same, so the next render takes that
// output whole instead of building it again. A cluster renders on every change, and with
// 1 000 TenantGateways a change of one must not cost a thousand renders: before this memo,
// one new exposure among 10 000 on 1 000 tenants took 170 ms of render (and 100 MB of
// garbage), nearly all of it the 999 tenants that had not changed.
//
// Only a TenantGateway rendered anew is kept (not one that renders its previous objects
// again: those read Options.Previous). Its status is kept as it was before sharedBudgets
// and Complete, which add what depends on other tenants and on translate, and are run
// again on every render; the objects are kept as Render returned them (after reuse), so a
// replayed tenant's objects are the previous result's own pointers.

// tenantMemo is what one TenantGateway read and rendered.
type tenantMemo struct {
	src       *v1alpha1.TenantGateway
	exposures []*v1alpha1.DatabaseExposure // assigned to it, in input order
	reads     []read
	recipes   []keyedRecipe
	certNames []CertificateNames
	tenant    Tenant
	// order is, for each exposure status it rendered in order, the exposure's memo
	// (exposurememo.go), or nil for the next of statuses.
	order      []*exposureMemo
	statuses   []Exposure
	gateways   []*gwv1.Gateway
	sets       []*gwv1.ListenerSet
	httpRoutes []*gwv1.HTTPRoute
	tlsRoutes  []*gwv1.TLSRoute
	tcpRoutes  []*gwv1.TCPRoute
	access     []*v1alpha1.AccessPolicy
	issuers    []*cmv1.Issuer
	certs      []*cmv1.Certificate
	secrets    []*corev1.Secret
}

// recording is what the TenantGateway being rendered has read and gathered so far.
type recording struct {
	reads     []read
	recipes   []keyedRecipe
	certNames []CertificateNames
	exposures []placed // the exposure memos, by the place of their status
}

type keyedRecipe struct {
	key    nsName
	recipe routeRecipe
}

// renderOpts are the options every TenantGateway's render reads: when one changes, no
// tenant memo holds.
type renderOpts struct {
	certManager                  bool
	noCertManager, certManagerNS string
}

func optsOf(o Options) renderOpts {
	return renderOpts{o.CertManager, o.NoCertManagerReason, o.CertManagerNamespace}
}

// marks are the lengths of the result's lists: what one tenant appended lies between two.
type marks struct {
	gateways, sets, httpRoutes, tlsRoutes, tcpRoutes, access, issuers, certs, secrets, exposures int
}

func (r *renderer) marks() marks {
	o := r.out
	return marks{len(o.Gateways), len(o.ListenerSets), len(o.HTTPRoutes), len(o.TLSRoutes), len(o.TCPRoutes),
		len(o.AccessPolicies), len(o.Issuers), len(o.Certificates), len(o.Secrets), len(o.Exposures)}
}

// fresh is a tenant rendered anew this time, whose memo is completed once its objects are
// final (after reuse).
type fresh struct {
	m           *tenantMemo
	from, until marks
}

// tenant renders one TenantGateway: the previous render's output when nothing it read
// changed, else anew (renderTenant), recording what it reads.
func (r *renderer) tenant(src *v1alpha1.TenantGateway) {
	key := keyOf(src)
	ins := r.exposures[[2]string{src.Namespace, src.Name}]
	srcs := make([]*v1alpha1.DatabaseExposure, len(ins))
	for i, in := range ins {
		srcs[i] = in.src
	}
	if m := r.prev.tenants[key]; m != nil && r.prev.opts == optsOf(r.opts) && m.src == src && slices.Equal(m.exposures, srcs) && r.tenantHolds(m) {
		r.replay(m)
		return
	}
	from := r.marks()
	r.rec = &recording{}
	r.renderTenant(src)
	rec := r.rec
	r.rec = nil
	st := &r.out.Tenants[len(r.out.Tenants)-1]
	if !st.Rendered {
		r.forget(rec)
		return
	}
	until := r.marks()
	m := &tenantMemo{src: src, exposures: srcs, reads: rec.reads, recipes: rec.recipes, certNames: rec.certNames, tenant: copyTenant(*st),
		order: make([]*exposureMemo, until.exposures-from.exposures)}
	for _, p := range rec.exposures {
		m.order[p.at] = p.m
	}
	for i, x := range r.out.Exposures[from.exposures:until.exposures] {
		if m.order[i] == nil {
			m.statuses = append(m.statuses, copyExposure(x))
		}
	}
	r.fresh = append(r.fresh, fresh{m, from, until})
}

// forget drops what a TenantGateway that renders its previous objects again built before
// it gave up (its listeners were counted after its exposures were rendered): the routes it
// now serves are the previous ones, which the route memo must not take for those of the
// new recipes, and the exposure memos describe routes that were not handed out.
func (r *renderer) forget(rec *recording) {
	for _, kr := range rec.recipes {
		delete(r.recipes, kr.key)
	}
	for _, p := range rec.exposures {
		for _, kr := range p.m.recipes {
			delete(r.recipes, kr.key)
		}
		delete(r.out.memo.exposures, keyOf(p.m.key.src))
	}
}

// tenantHolds reports whether every answer m's render got, its own and its exposures',
// is still the answer.
func (r *renderer) tenantHolds(m *tenantMemo) bool {
	if !r.holds(m.reads) {
		return false
	}
	for _, x := range m.order {
		if x != nil && !r.holds(x.reads) {
			return false
		}
	}
	return true
}

// holds reports whether every answer a render got is still the answer: asked again where
// an object it is computed from changed (changes.go).
func (r *renderer) holds(reads []read) bool {
	for _, rd := range reads {
		if r.changes.mayHaveChanged(rd.q) && !same(r.answer(rd.q), rd.answer) {
			return false
		}
	}
	return true
}

// replay appends what m rendered to the result.
func (r *renderer) replay(m *tenantMemo) {
	o := r.out
	o.Gateways = append(o.Gateways, m.gateways...)
	o.ListenerSets = append(o.ListenerSets, m.sets...)
	o.HTTPRoutes = append(o.HTTPRoutes, m.httpRoutes...)
	o.TLSRoutes = append(o.TLSRoutes, m.tlsRoutes...)
	o.TCPRoutes = append(o.TCPRoutes, m.tcpRoutes...)
	o.AccessPolicies = append(o.AccessPolicies, m.access...)
	o.Issuers = append(o.Issuers, m.issuers...)
	o.Certificates = append(o.Certificates, m.certs...)
	o.Secrets = append(o.Secrets, m.secrets...)
	next := 0
	for _, x := range m.order {
		if x == nil {
			o.Exposures = append(o.Exposures, copyExposure(m.statuses[next]))
			next++
			continue
		}
		o.Exposures = append(o.Exposures, copyExposure(x.status))
		for _, kr := range x.recipes {
			r.recipes[kr.key] = kr.recipe
		}
		o.memo.exposures[keyOf(x.key.src)] = x
	}
	o.Tenants = append(o.Tenants, copyTenant(m.tenant))
	for _, kr := range m.recipes {
		r.recipes[kr.key] = kr.recipe
	}
	r.addCertificateNames(m.certNames)
	o.memo.tenants[keyOf(m.src)] = m
}

// keepTenants completes the memos of the tenants rendered anew with their final objects
// (Render calls it after reuse).
func (r *renderer) keepTenants() {
	o := r.out
	for _, f := range r.fresh {
		m, a, b := f.m, f.from, f.until
		m.gateways = slices.Clone(o.Gateways[a.gateways:b.gateways])
		m.sets = slices.Clone(o.ListenerSets[a.sets:b.sets])
		m.httpRoutes = slices.Clone(o.HTTPRoutes[a.httpRoutes:b.httpRoutes])
		m.tlsRoutes = slices.Clone(o.TLSRoutes[a.tlsRoutes:b.tlsRoutes])
		m.tcpRoutes = slices.Clone(o.TCPRoutes[a.tcpRoutes:b.tcpRoutes])
		m.access = slices.Clone(o.AccessPolicies[a.access:b.access])
		m.issuers = slices.Clone(o.Issuers[a.issuers:b.issuers])
		m.certs = slices.Clone(o.Certificates[a.certs:b.certs])
		m.secrets = slices.Clone(o.Secrets[a.secrets:b.secrets])
		// The tenant's own Gateway or ListenerSet is the one object of its kind it renders.
		if len(m.gateways) == 1 {
			m.tenant.gw = m.gateways[0]
		}
		if len(m.sets) == 1 {
			m.tenant.set = m.sets[0]
		}
		o.memo.tenants[keyOf(m.src)] = m
	}
	// The exposures' AccessPolicies as returned (reuse may have put the previous one in
	// place of an equal new one).
	var final map[nsName]*v1alpha1.AccessPolicy
	for _, x := range r.freshExposures {
		for i, a := range x.access {
			if final == nil {
				final = byName(o.AccessPolicies)
			}
			if f := final[keyOf(a)]; f != nil {
				x.access[i] = f
			}
		}
	}
	o.memo.opts = optsOf(r.opts)
}

// copyTenant is t with a status of its own: sharedBudgets and Complete change a result's.
func copyTenant(t Tenant) Tenant {
	t.Status = *t.Status.DeepCopy()
	return t
}

// copyExposure is x with the parts Render and Complete change in place made its own:
// the conditions (sorted, set) and the members (their reasons); Complete replaces the
// addresses and access lists, it does not change them.
func copyExposure(x Exposure) Exposure {
	x.Status.Conditions = slices.Clone(x.Status.Conditions)
	x.Status.Members = slices.Clone(x.Status.Members)
	return x
}
