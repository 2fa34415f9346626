package render

import (
	"slices"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/engine"
)

// The per-exposure memo: within a TenantGateway rendered anew, an accepted exposure
// without members whose object, place (listener, port, hostnames, its TenantGateway) and
// answers (reads.go) are the same renders the same route, policy and status as last time.
// A TenantGateway is rendered anew whenever its own status is written back, which happens
// on most changes of its exposures; with 10 000 exposures on one TenantGateway, building
// each exposure's status again was most of a render.
//
// An exposure with spec.members is always rendered: its members read their Services and
// their routes' names, and are few.

// exposureMemo is what one accepted exposure read and rendered.
type exposureMemo struct {
	key   exposureKey
	reads []read
	// recipes are its route's (routes are taken from the route memo by them, so a replay
	// hands out the previous result's own route).
	recipes []keyedRecipe
	status  Exposure
	access  []*v1alpha1.AccessPolicy
	names   []CertificateNames
}

// exposureKey is everything of its input an accepted exposure's render reads besides its
// answers: its object (defaulted once per object), its listener and hostnames, and of its
// TenantGateway the name, namespace and shared Gateway.
type exposureKey struct {
	src            *v1alpha1.DatabaseExposure
	release        string
	listener       string
	port           int32
	protocol       string
	hosts          string
	tenant         nsName
	parentNS, gwNS string
	parent         string
	viaSet         bool
}

func (b *build) exposureKey(in exposureInput, l *dbListener, hosts []string) exposureKey {
	k := exposureKey{src: in.src, release: in.release, listener: l.name, port: l.port, protocol: string(l.protocol), hosts: joinHosts(hosts), tenant: keyOf(b.t)}
	if ref := b.t.Spec.ParentGatewayRef; ref != nil {
		k.viaSet, k.gwNS, k.parent = true, ref.Namespace, ref.Name
	}
	return k
}

// renderExposure renders one accepted exposure: its previous output when its key and
// answers hold, else anew (build.exposure), keeping what it read and rendered.
func (b *build) renderExposure(in exposureInput, e engine.Engine, l *dbListener, hosts []string, members []memberPlan) {
	r := b.r
	if len(members) > 0 || len(in.d.Spec.Members) > 0 || r.rec == nil {
		b.exposure(in, e, l, hosts, members)
		return
	}
	key := b.exposureKey(in, l, hosts)
	name := keyOf(in.src)
	at := len(b.exposureStatus)
	if m := r.prev.exposures[name]; m != nil && m.key == key && r.holds(m.reads) && b.replayExposure(m) {
		r.out.memo.exposures[name] = m
		r.rec.exposures = append(r.rec.exposures, placed{at, m})
		return
	}
	reads, recipes := len(r.rec.reads), len(r.rec.recipes)
	access, names := len(b.access), len(b.certNames)
	b.exposure(in, e, l, hosts, members)
	if len(b.exposureStatus) != at+1 || len(r.rec.recipes) != recipes+1 {
		return // not one status and one route: not kept (what it read stays the tenant's)
	}
	// What it read and its route's recipe are its memo's, not its TenantGateway's: the
	// TenantGateway's memo holds while its own answers and each of its exposures' do.
	m := &exposureMemo{key: key, reads: slices.Clone(r.rec.reads[reads:]), recipes: slices.Clone(r.rec.recipes[recipes:]),
		access: slices.Clone(b.access[access:]), names: slices.Clone(b.certNames[names:]), status: copyExposure(b.exposureStatus[at])}
	r.rec.reads, r.rec.recipes = r.rec.reads[:reads], r.rec.recipes[:recipes]
	r.out.memo.exposures[name] = m
	r.rec.exposures = append(r.rec.exposures, placed{at, m})
	r.freshExposures = append(r.freshExposures, m)
}

// placed is an exposure memo and the place of its status among its TenantGateway's.
type placed struct {
	at int
	m  *exposureMemo
}

// replayExposure appends what m rendered. It reports false, having appended nothing, when
// its route is not in the route memo.
func (b *build) replayExposure(m *exposureMemo) bool {
	r := b.r
	kr := m.recipes[0]
	prev := r.previousRoute(kr.key, kr.recipe)
	if prev.tls == nil && prev.tcp == nil {
		return false
	}
	if prev.tls != nil {
		b.tlsRoutes = append(b.tlsRoutes, prev.tls)
	} else {
		b.tcpRoutes = append(b.tcpRoutes, prev.tcp)
	}
	r.recipes[kr.key] = kr.recipe
	b.access = append(b.access, m.access...)
	b.certNames = append(b.certNames, m.names...)
	b.exposureStatus = append(b.exposureStatus, copyExposure(m.status))
	return true
}
