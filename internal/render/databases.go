package render

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/conditions"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/trustanchor"
)

// LabelDatabaseExposure marks the routes rendered for a DatabaseExposure with its name.
const LabelDatabaseExposure = "snigate.dev/database-exposure"

// Exposure is one DatabaseExposure's status, and what was rendered for it.
type Exposure struct {
	Namespace string                          `json:"namespace"`
	Name      string                          `json:"name"`
	Status    v1alpha1.DatabaseExposureStatus `json:"status"`
	// Rendered is true when this call rendered the exposure anew (its route, or no route
	// because it is refused); false when its TenantGateway kept its previous objects, and
	// so the exposure's previous route stays.
	Rendered bool `json:"-"`
	// Target is what the certificate probe connects to, nil when nothing is published.
	Target *ProbeTarget `json:"-"`
	// MemberTargets are the published members' (spec.members), each probed on its own.
	MemberTargets []*ProbeTarget `json:"-"`

	gateway [2]string          // the TenantGateway's Gateway (namespace, name), for Complete
	route   string             // "TLSRoute" or "TCPRoute" (the route has the exposure's name)
	stored  []metav1.Condition // the conditions the input object carried
	engine  engine.Engine      // with spec.members: for MembersAccepted's message
	// serving is Programmed's message once served, made with the status (a memo keeps it):
	// Complete sets it on every exposure, on every render.
	serving string
}

// CertificateNames are the external hostnames snigate adds to a cert-manager Certificate
// that exposures name in spec.certificateRef (all of them, for a Certificate several
// exposures share).
type CertificateNames struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Hostnames []string `json:"hostnames"`
}

// ProbeTarget is how the certificate probe reaches an exposure's backend: the Service the
// exposure names, the engine (how its clients start TLS) and the external hostnames the
// certificate must name (the first is the SNI).
type ProbeTarget struct {
	// Route is the route's name, which keys the probe (probe.Key{namespace, Route}): the
	// exposure's own name, or a member's route.
	Route       string
	Engine      v1alpha1.Engine
	Service     string // the backend Service's name, in the exposure's namespace
	ServicePort int32
	Hostnames   []string
	// TrustAnchor names the TrustAnchor the chain must lead to ("" without one).
	TrustAnchor string
	// CertificateSecret is the Secret of the cert-manager Certificate the exposure names in
	// spec.certificateRef ("" without one, or before the Certificate exists): what the
	// backend should serve once it has picked up a reissue.
	CertificateSecret string
}

// Probe is a certificate probe's verdict on one exposure (package probe makes it; the
// runner hands the latest ones in Options.Probes).
type Probe struct {
	Reason      string
	Message     string
	Certificate *v1alpha1.ServerCertificate
	// Endpoints are the route's ready endpoints, each with what it served.
	Endpoints []v1alpha1.EndpointCertificate
}

// exposureInput is one defaulted DatabaseExposure and what the first pass decided of it.
type exposureInput struct {
	d       *v1alpha1.DatabaseExposure // defaulted copy
	src     *v1alpha1.DatabaseExposure
	release string
}

// assignExposures decides, for each DatabaseExposure, which TenantGateway publishes it (its
// tenantGatewayRef, or the one whose tree its namespace is in: the TenantGateway's own
// namespace, a child labelled snigate.dev/gateway, an attached namespace), and refuses
// the ones that are invalid or have none. A namespace outside a TenantGateway's tree never
// publishes through it, whatever its ref says.
func (r *renderer) assignExposures(tgws map[string]*v1alpha1.TenantGateway) {
	r.exposures = map[[2]string][]exposureInput{}
	inTreeOf := func(ns string, t *v1alpha1.TenantGateway) bool {
		if ns == t.Namespace || slices.Contains(t.Spec.AttachedNamespaces, ns) {
			return true
		}
		n := r.idx.namespaces[ns]
		return n != nil && n.Labels[LabelGateway] == t.Namespace
	}
	// The TenantGateways by name, and those that attach each namespace: the candidates of
	// an exposure, looked up rather than tried one by one.
	named := map[string][]*v1alpha1.TenantGateway{}
	attached := map[string][]*v1alpha1.TenantGateway{}
	for _, ns := range sortedKeys(tgws) {
		t := tgws[ns]
		named[t.Name] = append(named[t.Name], t)
		for _, a := range t.Spec.AttachedNamespaces {
			attached[a] = append(attached[a], t)
		}
	}
	for _, src := range r.in.DatabaseExposures {
		c := r.check(src)
		d := c.d
		release := cmp.Or(d.Spec.Release, d.Name)
		if len(c.errs) > 0 {
			r.refuseExposure(src, v1alpha1.ReasonInvalid, c.errs.ToAggregate().Error())
			continue
		}
		if errs := c.releaseErrs; len(errs) > 0 {
			r.refuseExposure(src, v1alpha1.ReasonInvalid, fmt.Sprintf("spec.release: the default, metadata.name %q, is not a DNS-1035 label (%s): set spec.release", release, strings.Join(errs, "; ")))
			continue
		}
		var target *v1alpha1.TenantGateway
		if ref := d.Spec.TenantGatewayRef; ref != nil {
			for _, t := range named[ref.Name] {
				if (ref.Namespace == "" || ref.Namespace == t.Namespace) && inTreeOf(d.Namespace, t) {
					target = t
				}
			}
			if target == nil {
				r.refuseExposure(src, v1alpha1.ReasonNoTenantGateway, fmt.Sprintf("spec.tenantGatewayRef: no TenantGateway %s whose tree holds namespace %s", ref.Name, d.Namespace))
				continue
			}
		} else {
			// The first in namespace order of those whose tree holds it: its own
			// namespace's, its label's, or one attaching it.
			var candidates []*v1alpha1.TenantGateway
			if t := tgws[d.Namespace]; t != nil {
				candidates = append(candidates, t)
			}
			if n := r.idx.namespaces[d.Namespace]; n != nil && tgws[n.Labels[LabelGateway]] != nil {
				candidates = append(candidates, tgws[n.Labels[LabelGateway]])
			}
			candidates = append(candidates, attached[d.Namespace]...)
			for _, t := range candidates {
				if inTreeOf(d.Namespace, t) && (target == nil || t.Namespace < target.Namespace) {
					target = t
				}
			}
			if target == nil {
				r.refuseExposure(src, v1alpha1.ReasonNoTenantGateway, fmt.Sprintf("namespace %s is in no TenantGateway's tree: create a TenantGateway there, label the namespace %s=<its namespace>, or attach it", d.Namespace, LabelGateway))
				continue
			}
		}
		k := [2]string{target.Namespace, target.Name}
		r.exposures[k] = append(r.exposures[k], exposureInput{d: d, src: src, release: release})
	}
}

// refuseExposure records the status of an exposure that publishes nothing.
func (r *renderer) refuseExposure(d *v1alpha1.DatabaseExposure, reason, msg string) {
	r.out.Exposures = append(r.out.Exposures, r.refused(d, reason, msg))
}

func (r *renderer) refused(d *v1alpha1.DatabaseExposure, reason, msg string) Exposure {
	x := Exposure{Namespace: d.Namespace, Name: d.Name, Rendered: true, stored: d.Status.Conditions}
	x.Status.ObservedGeneration = d.Generation
	r.exposureCondition(&x, d, v1alpha1.ConditionAccepted, false, reason, msg)
	r.exposureCondition(&x, d, v1alpha1.ConditionProgrammed, false, reason, "nothing is published: "+msg)
	return x
}

// previousExposures renders again, for a TenantGateway that renders nothing new, what its
// exposures had: their previous routes keep serving. An exposure that had none says why.
func (r *renderer) previousExposures(t *v1alpha1.TenantGateway, reason, msg string) {
	key := [2]string{t.Namespace, t.Name}
	prev := map[[2]string]Exposure{}
	if p := r.opts.Previous; p != nil {
		for _, x := range p.Exposures {
			if x.gateway == key {
				prev[[2]string{x.Namespace, x.Name}] = x
			}
		}
	}
	for _, in := range r.exposures[key] {
		k := [2]string{in.d.Namespace, in.d.Name}
		x, ok := prev[k]
		if !ok {
			// Nothing rendered to keep (a restart): whatever a cluster holds of it stays
			// (Merge, and the controller deletes none of it), so it is not rendered anew.
			x := r.refused(in.src, v1alpha1.ReasonTenantGatewayNotRendered, fmt.Sprintf("TenantGateway %s/%s renders nothing new (%s: %s)", t.Namespace, t.Name, reason, msg))
			x.Rendered = false
			r.out.Exposures = append(r.out.Exposures, x)
			continue
		}
		// Its own status, not the previous result's: Render must leave Previous as it was
		// (it is still read while this one is built and completed).
		x.Rendered, x.Status = false, *x.Status.DeepCopy()
		r.out.Exposures = append(r.out.Exposures, x)
		if ref := in.d.Spec.CertificateRef; ref != nil && len(x.Status.Hostnames) > 0 {
			// Its Certificate keeps the names the kept route serves.
			r.addCertificateNames([]CertificateNames{{Namespace: k[0], Name: ref.Name, Hostnames: x.Status.Hostnames}})
			for _, ms := range x.Status.Members {
				if ms.Route != "" {
					r.addCertificateNames([]CertificateNames{{Namespace: k[0], Name: ref.Name, Hostnames: ms.Hostnames}})
				}
			}
		}
		// Its routes and policies: its own and its members' (all labelled with its name).
		for _, tr := range r.opts.Previous.TLSRoutes {
			if tr.Namespace == k[0] && tr.Labels[LabelDatabaseExposure] == k[1] {
				r.out.TLSRoutes = append(r.out.TLSRoutes, tr)
			}
		}
		for _, tr := range r.opts.Previous.TCPRoutes {
			if tr.Namespace == k[0] && tr.Name == k[1] {
				r.out.TCPRoutes = append(r.out.TCPRoutes, tr)
			}
		}
		for _, ap := range r.opts.Previous.AccessPolicies {
			if ap.Namespace == k[0] && ap.Labels[LabelDatabaseExposure] == k[1] {
				r.out.AccessPolicies = append(r.out.AccessPolicies, ap)
			}
		}
	}
}

func (r *renderer) exposureCondition(x *Exposure, d *v1alpha1.DatabaseExposure, typ string, ok bool, reason, msg string) {
	conditions.Set(&x.Status.Conditions, d.Status.Conditions, metav1.Condition{
		Type: typ, Status: conditions.Status(ok), Reason: reason, Message: msg, ObservedGeneration: d.Generation,
	}, r.opts.Now)
}

// dbListener is a listener the exposures of one TenantGateway share (tls-<engine> on the
// engine's port), or own (tcp-<release> of a server-speaks-first engine).
type dbListener struct {
	name       string
	port       int32
	protocol   gwv1.ProtocolType
	engine     v1alpha1.Engine
	hosts      []string // the exposures' hostnames
	namespaces []string // the exposures' namespaces
	reused     int      // index of a tlsPassthroughListeners entry named like the engine, or -1
}

// databases adds the DatabaseExposures' listeners to the Gateway and renders their routes.
// Older exposures win: one claiming a hostname (on the same port) or a port another has
// is refused, naming the winner. A listener exists while some exposure uses it: the first
// exposure of an engine creates tls-<engine>, the last one's removal removes it, and adding
// or removing any other exposure changes only its own route.
func (b *build) databases() {
	t := b.t
	exps := slices.Clone(b.r.exposures[[2]string{t.Namespace, t.Name}])
	// Sized once: an Exposure is large, and a TenantGateway may have 10 000.
	b.exposureStatus = slices.Grow(b.exposureStatus, len(exps))
	b.tlsRoutes = slices.Grow(b.tlsRoutes, len(exps))
	slices.SortFunc(exps, func(a, c exposureInput) int {
		return cmp.Or(a.d.CreationTimestamp.Compare(c.d.CreationTimestamp.Time),
			strings.Compare(a.d.Namespace, c.d.Namespace), strings.Compare(a.d.Name, c.d.Name))
	})
	// Who holds each port already: the gateway's own and the spec's passthrough listeners.
	portOwner := map[int32]string{80: "the http listener", 443: "the https listeners"}
	spec := map[string]int{} // listener name -> index in the Gateway
	for i, l := range b.gw.Spec.Listeners {
		spec[string(l.Name)] = i
		if l.Port != 80 && l.Port != 443 {
			portOwner[int32(l.Port)] = "listener " + string(l.Name)
		}
	}
	var listeners []*dbListener
	byName := map[string]*dbListener{}
	hostOwner := map[int32]map[string]string{} // port -> hostname -> exposure
	type accepted struct {
		in      exposureInput
		e       engine.Engine
		l       *dbListener
		hosts   []string
		members []memberPlan
	}
	var ok []accepted
	for _, in := range exps {
		d := in.d
		e, _ := engine.Lookup(d.Spec.Engine)
		port := e.Port
		if d.Spec.Port != nil {
			port = *d.Spec.Port
		}
		apex := b.apexOf(d.Namespace)
		who := "DatabaseExposure " + d.Namespace + "/" + d.Name
		refuse := func(reason, msg string) {
			b.exposureStatus = append(b.exposureStatus, b.r.refused(in.src, reason, msg))
		}
		if msg := b.r.routeNameInUse(d, e); msg != "" {
			refuse(v1alpha1.ReasonNameInUse, msg)
			continue
		}
		if !e.SNIRouted() {
			if d.Spec.Port == nil {
				refuse(v1alpha1.ReasonServerSpeaksFirst, fmt.Sprintf(
					"a %s server speaks first and its clients upgrade to TLS inside the protocol, so no ClientHello (and no SNI) arrives to route by: set spec.port to give %s a TCP listener of its own on the tenant address (TLS stays end to end between client and server)",
					d.Spec.Engine, in.release))
				continue
			}
			name := "tcp-" + in.release
			if owner, taken := portOwner[port]; taken {
				refuse(v1alpha1.ReasonPortInUse, fmt.Sprintf("spec.port %d is %s's", port, owner))
				continue
			}
			if l := byName[name]; l != nil {
				refuse(v1alpha1.ReasonHostnameConflict, fmt.Sprintf("listener %s belongs to an older exposure of release %s (in namespace %s): set another spec.release", name, in.release, l.namespaces[0]))
				continue
			}
			l := &dbListener{name: name, port: port, protocol: gwv1.TCPProtocolType, engine: d.Spec.Engine, reused: -1, namespaces: []string{d.Namespace}}
			portOwner[port] = who
			listeners = append(listeners, l)
			byName[name] = l
			ok = append(ok, accepted{in, e, l, []string{in.release + "." + string(d.Spec.Engine) + "." + apex},
				refuseMembers(d, v1alpha1.ReasonServerSpeaksFirst, fmt.Sprintf(
					"a %s server speaks first, so no SNI names a member: each node needs a port of its own (a DatabaseExposure with spec.port per node)", d.Spec.Engine))})
			continue
		}
		var hosts []string
		if t.Spec.DatabaseHostnames != v1alpha1.DatabaseHostnamesFlat {
			hosts = append(hosts, in.release+"."+string(d.Spec.Engine)+"."+apex)
		}
		if t.Spec.DatabaseHostnames != v1alpha1.DatabaseHostnamesSubdomain {
			hosts = append(hosts, in.release+"."+apex)
		}
		name := e.Listener()
		if port != e.Port {
			name = fmt.Sprintf("%s-%d", e.Listener(), port)
		}
		if i, reuse := spec[name]; reuse {
			// A tlsPassthroughListeners entry named like the engine is the engine's
			// listener, on the entry's port: reused, never duplicated.
			specPort := int32(b.gw.Spec.Listeners[i].Port)
			if d.Spec.Port != nil && *d.Spec.Port != specPort {
				refuse(v1alpha1.ReasonPortInUse, fmt.Sprintf("listener %s is the TenantGateway's tlsPassthroughListeners entry on port %d, not %d: drop spec.port or set it to %d", name, specPort, port, specPort))
				continue
			}
			port = specPort
		}
		l := byName[name]
		if l == nil {
			if i, reuse := spec[name]; reuse {
				// Its hostname stays the spec's.
				l = &dbListener{name: name, port: port, protocol: gwv1.TLSProtocolType, engine: d.Spec.Engine, reused: i}
			} else if owner, taken := portOwner[port]; taken {
				refuse(v1alpha1.ReasonPortInUse, fmt.Sprintf("port %d is %s's; a port carries one engine: set spec.port", port, owner))
				continue
			} else {
				l = &dbListener{name: name, port: port, protocol: gwv1.TLSProtocolType, engine: d.Spec.Engine, reused: -1}
				portOwner[port] = "engine " + string(d.Spec.Engine)
				listeners = append(listeners, l)
			}
			byName[name] = l
		}
		if l.reused >= 0 {
			lh := string(*b.gw.Spec.Listeners[l.reused].Hostname)
			hosts = slices.DeleteFunc(hosts, func(h string) bool { return !hostsOverlap(lh, h) || strings.HasPrefix(h, "*") })
			if len(hosts) == 0 {
				refuse(v1alpha1.ReasonInvalid, fmt.Sprintf("listener %s (spec.tlsPassthroughListeners) has hostname %s, which covers none of this exposure's hostnames", name, lh))
				continue
			}
		}
		if hostOwner[port] == nil {
			hostOwner[port] = map[string]string{}
		}
		if i := slices.IndexFunc(hosts, func(h string) bool { return hostOwner[port][h] != "" }); i >= 0 {
			refuse(v1alpha1.ReasonHostnameConflict, fmt.Sprintf("hostname %s on port %d is %s's (the older exposure wins)", hosts[i], port, hostOwner[port][hosts[i]]))
			continue
		}
		for _, h := range hosts {
			hostOwner[port][h] = who
		}
		l.hosts = append(l.hosts, hosts...)
		l.namespaces = append(l.namespaces, d.Namespace)
		ok = append(ok, accepted{in, e, l, hosts, b.planMembers(in, e, l, apex, hostOwner[port])})
	}

	// The listeners, in port order after the spec's, each allowing exactly the namespaces of
	// its exposures (and a reused entry its own namespace too).
	slices.SortFunc(listeners, func(a, c *dbListener) int {
		return cmp.Or(cmp.Compare(a.port, c.port), strings.Compare(a.name, c.name))
	})
	for _, l := range byName {
		if l.reused < 0 {
			continue
		}
		gl := &b.gw.Spec.Listeners[l.reused]
		if len(l.namespaces) > 0 {
			gl.AllowedRoutes = fromNamespaces("TLSRoute", uniqueSorted(append(l.namespaces, t.Namespace)...))
		}
	}
	for _, l := range listeners {
		gl := gwv1.Listener{Name: gwv1.SectionName(l.name), Port: gwv1.PortNumber(l.port), Protocol: l.protocol,
			AllowedRoutes: fromNamespaces(gwv1.Kind(map[gwv1.ProtocolType]string{gwv1.TLSProtocolType: "TLSRoute", gwv1.TCPProtocolType: "TCPRoute"}[l.protocol]), uniqueSorted(l.namespaces...))}
		if l.protocol == gwv1.TLSProtocolType {
			gl.TLS = &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)}
			gl.Hostname = ptr(gwv1.Hostname(b.engineHostname(l)))
		}
		b.gw.Spec.Listeners = append(b.gw.Spec.Listeners, gl)
	}

	for _, a := range ok {
		b.renderExposure(a.in, a.e, a.l, a.hosts, a.members)
	}
}

// engineHostname is a shared engine listener's hostname: *.<engine>.<apex> when every
// exposure's hostname is under it (databaseHostnames subdomain, none in a child apex),
// otherwise *.<apex>. Listeners are isolated per port, so *.<apex> on an engine's port
// takes nothing from the 443 listeners.
func (b *build) engineHostname(l *dbListener) string {
	sub := "*." + string(l.engine) + "." + b.t.Spec.Apex
	for _, h := range l.hosts {
		if !hostsOverlap(sub, h) {
			return "*." + b.t.Spec.Apex
		}
	}
	return sub
}

// apexOf is the apex of namespace ns of the tree: a child's own (its snigate.dev/host
// label), else the TenantGateway's. Routes in a namespace stay inside its apex, as the
// route-hostnames admission policy demands.
func (b *build) apexOf(ns string) string {
	for _, c := range b.tree.children {
		if c.namespace == ns {
			return c.apex
		}
	}
	return b.t.Spec.Apex
}

// exposure renders one accepted exposure's route and status.
func (b *build) exposure(in exposureInput, e engine.Engine, l *dbListener, hosts []string, members []memberPlan) {
	d := in.d
	x := Exposure{Namespace: d.Namespace, Name: d.Name, Rendered: true, gateway: [2]string{b.t.Namespace, b.t.Name}, stored: in.src.Status.Conditions}
	x.Status.ObservedGeneration = d.Generation
	x.Status.Hostnames, x.Status.Listener, x.Status.Port = hosts, l.name, l.port
	x.serving = fmt.Sprintf("serving %s on port %d", strings.Join(hosts, ", "), l.port)
	m := metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: map[string]string{
		LabelDatabaseExposure: d.Name, LabelTenantGateway: b.t.Name, engine.Label: string(e.Name),
	}, OwnerReferences: exposureOwner(d)}
	recipe := routeRecipe{uid: d.UID, engine: e.Name, tenant: b.t.Name, parentNS: b.t.Namespace, parent: b.t.Name, viaSet: b.t.Spec.ParentGatewayRef != nil,
		listener: l.name, protocol: l.protocol, backend: d.Spec.BackendRef.Name, backendPort: d.Spec.BackendRef.Port,
		hosts: joinHosts(hosts), namespace: d.Namespace, name: d.Name}
	parent := b.parentRef(l.name)
	if l.protocol == gwv1.TCPProtocolType {
		key := nsName{d.Namespace, d.Name}
		b.r.setRecipe(key, recipe)
		prev := b.r.previousRoute(key, recipe)
		x.route = "TCPRoute"
		b.exposureAccess(d, m, "TCPRoute")
		if prev.tcp != nil {
			b.tcpRoutes = append(b.tcpRoutes, prev.tcp)
		} else {
			rm := m
			names := strings.Join(hosts, ",")
			rm.Annotations = map[string]string{AnnotationExternalDNSHostname: names, AnnotationExternalDNSHostnameLegacy: names}
			b.tcpRoutes = append(b.tcpRoutes, &gwv1.TCPRoute{
				TypeMeta:   metav1.TypeMeta{APIVersion: gwv1.GroupVersion.String(), Kind: "TCPRoute"},
				ObjectMeta: rm,
				Spec: gwv1.TCPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}},
					Rules: []gwv1.TCPRouteRule{{BackendRefs: backendRefs(d.Spec.BackendRef)}}},
			})
		}
	} else {
		x.route = "TLSRoute"
		b.exposureAccess(d, m, "TLSRoute")
		b.tlsRoute(m, recipe, parent, hosts, d.Spec.BackendRef)
	}
	ca := "ca.crt"
	anchor := ""
	if ref := d.Spec.TrustAnchorRef; ref != nil {
		anchor = ref.Name
		// The file a reader saves the published Secret's ca.crt to (docs/databases.md).
		ca = trustanchor.SecretName(b.r.anchorRelease(d.Namespace, ref.Name)) + ".crt"
	}
	x.Status.Connect = e.ConnectFor(hosts[0], l.port, d.Spec.BackendRef.Port, ca)
	if ref := d.Spec.CertificateRef; ref != nil {
		b.certNames = append(b.certNames, CertificateNames{Namespace: d.Namespace, Name: ref.Name, Hostnames: hosts})
	}
	x.Target = &ProbeTarget{Route: d.Name, Engine: d.Spec.Engine, Service: d.Spec.BackendRef.Name, ServicePort: d.Spec.BackendRef.Port, Hostnames: hosts, TrustAnchor: anchor}
	if ref := d.Spec.CertificateRef; ref != nil {
		x.Target.CertificateSecret = b.r.askString(question{kind: qCertificateSecret, key: nsName{d.Namespace, ref.Name}})
	}
	of := fmt.Sprintf("Gateway %s/%s", b.t.Namespace, b.t.Name)
	if ref := b.t.Spec.ParentGatewayRef; ref != nil {
		of = fmt.Sprintf("ListenerSet %s/%s on Gateway %s/%s", b.t.Namespace, b.t.Name, ref.Namespace, ref.Name)
	}
	b.r.exposureCondition(&x, in.src, v1alpha1.ConditionAccepted, true, v1alpha1.ReasonAccepted,
		fmt.Sprintf("published as %s on listener %s (port %d) of %s", strings.Join(hosts, ", "), l.name, l.port, of))
	b.r.exposureCondition(&x, in.src, v1alpha1.ConditionProgrammed, false, v1alpha1.ReasonPending, "waiting for the data plane")
	b.r.probeCondition(&x, in.src)
	b.members(in, e, l, members, &x, anchor, ca)
	b.r.memberVerdicts(&x, in.src)
	b.exposureStatus = append(b.exposureStatus, x)
}

// tlsRoute renders a TLSRoute of an exposure (its own, or a member's): the previous render's
// when it was built from the same recipe.
func (b *build) tlsRoute(m metav1.ObjectMeta, recipe routeRecipe, parent gwv1.ParentReference, hosts []string, backend v1alpha1.DatabaseBackendRef) {
	key := nsName{m.Namespace, m.Name}
	b.r.setRecipe(key, recipe)
	if prev := b.r.previousRoute(key, recipe); prev.tls != nil {
		b.tlsRoutes = append(b.tlsRoutes, prev.tls)
		return
	}
	hn := make([]gwv1.Hostname, len(hosts))
	for i, h := range hosts {
		hn[i] = gwv1.Hostname(h)
	}
	b.tlsRoutes = append(b.tlsRoutes, &gwv1.TLSRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gwv1.GroupVersion.String(), Kind: "TLSRoute"},
		ObjectMeta: m,
		Spec: gwv1.TLSRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}},
			Hostnames: hn, Rules: []gwv1.TLSRouteRule{{BackendRefs: backendRefs(backend)}}},
	})
}

func backendRefs(ref v1alpha1.DatabaseBackendRef) []gwv1.BackendRef {
	return []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{
		Name: gwv1.ObjectName(ref.Name), Port: ptr(gwv1.PortNumber(ref.Port)),
	}}}
}

// probeCondition sets CertificateVerified from the latest probe of the exposure.
func (r *renderer) probeCondition(x *Exposure, d *v1alpha1.DatabaseExposure) {
	pa := r.probe(x.Namespace, x.Name)
	p, probed := pa.probe, pa.probed
	if !probed {
		r.exposureCondition(x, d, v1alpha1.ConditionCertificateVerified, false, v1alpha1.ReasonProbePending, "the backend's certificate has not been probed yet")
		return
	}
	x.Status.ServerCertificate, x.Status.Endpoints = p.Certificate, p.Endpoints
	r.exposureCondition(x, d, v1alpha1.ConditionCertificateVerified, p.Reason == v1alpha1.ReasonVerified, p.Reason, p.Message)
}

// routeNameInUse names a route at the name the exposure's route would take (its own) that
// the exposure does not own, or "".
func (r *renderer) routeNameInUse(d *v1alpha1.DatabaseExposure, e engine.Engine) string {
	return r.askString(question{kind: qRouteInUse, owner: keyOf(d), uid: d.UID, flag: e.SNIRouted()})
}

// routeNameInUseOf is routeNameInUse for exposure d with UID uid (sni: its engine is routed
// by SNI, so its route is a TLSRoute).
func (r *renderer) routeNameInUseOf(d nsName, uid types.UID, sni bool) string {
	kind := "TLSRoute"
	var o metav1.Object
	if sni {
		if tr := r.idx.tlsRoutes.get(d); tr != nil {
			o = tr
		}
	} else if tr := r.idx.tcpRoutes.get(d); tr != nil {
		kind, o = "TCPRoute", tr
	}
	if o == nil {
		return ""
	}
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "DatabaseExposure" && ref.Name == d.name && (uid == "" || ref.UID == uid) {
		return ""
	}
	return fmt.Sprintf("%s %s/%s exists and is not this DatabaseExposure's: rename one of them", kind, d.namespace, d.name)
}

// anchorRelease is the release (the published Secret's name stem) of TrustAnchor name.
func (r *renderer) anchorRelease(ns, name string) string {
	return r.askString(question{kind: qAnchorRelease, key: nsName{ns, name}})
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// addCertificateNames gathers hostnames that cert-manager Certificates must carry.
func (r *renderer) addCertificateNames(more []CertificateNames) {
	if r.rec != nil {
		r.rec.certNames = append(r.rec.certNames, more...)
	}
	for _, m := range more {
		k := nsName{m.Namespace, m.Name}
		r.certNames[k] = append(r.certNames[k], m.Hostnames...)
	}
}

// certificateNames is what was gathered: one entry per Certificate with the union of its
// hostnames, both sorted.
func (r *renderer) certificateNames() []CertificateNames {
	var names []CertificateNames
	for k, hosts := range r.certNames {
		names = append(names, CertificateNames{Namespace: k.namespace, Name: k.name, Hostnames: uniqueSorted(hosts...)})
	}
	slices.SortFunc(names, func(a, b CertificateNames) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return names
}
