package render

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/conditions"
	"github.com/snigate/snigate/internal/engine"
	"github.com/snigate/snigate/internal/translate"
)

// Members of a clustered database (DatabaseExposure spec.members, issue 53). Kafka clients
// and MongoDB drivers reach one node first (the bootstrap or seed name: the exposure's own
// hostnames and route, to a Service over every node), learn the cluster's nodes from it and
// reconnect to each by the name that node advertises. Each member therefore gets hostnames
// of its own, <member>.<release>.<engine>.<apex> (and <member>.<release>.<apex>, per
// databaseHostnames), and a TLSRoute of its own, <exposure>.<member>, on the exposure's
// listener, to its own Service. Routes, not listeners: a cluster of any size costs the
// listener budget nothing.
//
// A member is decided like an exposure, after its exposure (older exposures first, then an
// exposure's members in spec order): a hostname an older claimant holds on the port is
// HostnameConflict, a route name someone else holds is NameInUse; a member of a
// server-speaks-first engine (MySQL, MariaDB: no SNI to route by, one port per release) is
// ServerSpeaksFirst. Each of those has no route. A member whose Service (or Service port)
// does not exist is rendered all the same, BackendNotFound: it serves once the Service
// appears. None of this touches the exposure's own route or its other members.
//
// The route name has a dot: members are DNS-1035 labels and exposure names are not
// restricted to one label, so <exposure>.<member> can only collide with an exposure whose
// own name has that dot in it, which wins (its route is its name).

// LabelDatabaseMember marks a member's route with the member's name.
const LabelDatabaseMember = "snigate.dev/database-member"

// MemberRoute is the name of the route (and AccessPolicy) of member of exposure.
func MemberRoute(exposure, member string) string { return exposure + "." + member }

// memberPlan is one spec.members entry as databases() decided it.
type memberPlan struct {
	m     v1alpha1.DatabaseMember
	route string
	// hosts are the member's hostnames; nil when it is refused (no route).
	hosts       []string
	reason, msg string
}

// planMembers decides the members of an exposure databases() accepted on listener l: their
// hostnames, claimed in owners (hostname → claimant on l's port) and on l.
func (b *build) planMembers(in exposureInput, e engine.Engine, l *dbListener, apex string, owners map[string]string) []memberPlan {
	d := in.d
	plans := make([]memberPlan, 0, len(d.Spec.Members))
	for _, m := range d.Spec.Members {
		p := memberPlan{m: m, route: MemberRoute(d.Name, m.Name)}
		refuse := func(reason, msg string) {
			p.reason, p.msg = reason, msg
			plans = append(plans, p)
		}
		if !e.SNIRouted() {
			refuse(v1alpha1.ReasonServerSpeaksFirst, fmt.Sprintf(
				"a %s server speaks first, so no SNI names a member: each node would need a port of its own (a DatabaseExposure with spec.port per node)", d.Spec.Engine))
			continue
		}
		if msg := b.r.memberRouteInUse(d, p.route); msg != "" {
			refuse(v1alpha1.ReasonNameInUse, msg)
			continue
		}
		var hosts []string
		if b.t.Spec.DatabaseHostnames != v1alpha1.DatabaseHostnamesFlat {
			hosts = append(hosts, m.Name+"."+in.release+"."+string(d.Spec.Engine)+"."+apex)
		}
		if b.t.Spec.DatabaseHostnames != v1alpha1.DatabaseHostnamesSubdomain {
			hosts = append(hosts, m.Name+"."+in.release+"."+apex)
		}
		if errs := validation.IsDNS1123Subdomain(hosts[0]); len(errs) > 0 {
			refuse(v1alpha1.ReasonInvalid, fmt.Sprintf("hostname %s: %s", hosts[0], strings.Join(errs, "; ")))
			continue
		}
		if l.reused >= 0 {
			lh := string(*b.gw.Spec.Listeners[l.reused].Hostname)
			hosts = slices.DeleteFunc(hosts, func(h string) bool { return !hostsOverlap(lh, h) })
			if len(hosts) == 0 {
				refuse(v1alpha1.ReasonInvalid, fmt.Sprintf("listener %s (spec.tlsPassthroughListeners) has hostname %s, which covers none of this member's hostnames", l.name, lh))
				continue
			}
		}
		if i := slices.IndexFunc(hosts, func(h string) bool { return owners[h] != "" }); i >= 0 {
			refuse(v1alpha1.ReasonHostnameConflict, fmt.Sprintf("hostname %s on port %d is %s's (the older claimant wins)", hosts[i], l.port, owners[hosts[i]]))
			continue
		}
		for _, h := range hosts {
			owners[h] = fmt.Sprintf("DatabaseExposure %s/%s member %s", d.Namespace, d.Name, m.Name)
		}
		l.hosts = append(l.hosts, hosts...)
		p.hosts, p.reason = hosts, v1alpha1.ReasonAccepted
		p.msg = "published on listener " + l.name + ", route " + p.route
		if msg := b.r.backendMissing(d.Namespace, m.BackendRef); msg != "" {
			// Rendered all the same: the route serves once the Service appears.
			p.reason, p.msg = v1alpha1.ReasonBackendNotFound, msg
		}
		plans = append(plans, p)
	}
	return plans
}

// refuseMembers is the plan of an exposure whose members cannot be published at all.
func refuseMembers(d *v1alpha1.DatabaseExposure, reason, msg string) []memberPlan {
	plans := make([]memberPlan, 0, len(d.Spec.Members))
	for _, m := range d.Spec.Members {
		plans = append(plans, memberPlan{m: m, route: MemberRoute(d.Name, m.Name), reason: reason, msg: msg})
	}
	return plans
}

// memberRouteInUse names what holds route name of an exposure's member, or "": a
// DatabaseExposure of that name (its route is its name), or a TLSRoute the exposure does
// not control.
func (r *renderer) memberRouteInUse(d *v1alpha1.DatabaseExposure, name string) string {
	return r.askString(question{kind: qMemberRouteInUse, key: nsName{d.Namespace, name}, owner: keyOf(d), uid: d.UID})
}

// memberRouteInUseOf is memberRouteInUse for exposure d with UID uid.
func (r *renderer) memberRouteInUseOf(d nsName, uid types.UID, name string) string {
	key := nsName{d.namespace, name}
	if r.idx.exposures.get(key) != nil {
		return fmt.Sprintf("route name %s is DatabaseExposure %s/%s's (an exposure's route has its name): rename the member", name, d.namespace, name)
	}
	if tr := r.idx.tlsRoutes.get(key); tr != nil {
		ref := metav1.GetControllerOf(tr)
		if ref == nil || ref.Kind != "DatabaseExposure" || ref.Name != d.name || (uid != "" && ref.UID != uid) {
			return fmt.Sprintf("TLSRoute %s/%s exists and is not this DatabaseExposure's: rename one of them", d.namespace, name)
		}
	}
	return ""
}

// backendMissing says why Service ref of namespace ns cannot be sent to, or "".
func (r *renderer) backendMissing(ns string, ref v1alpha1.DatabaseBackendRef) string {
	return r.askString(question{kind: qBackendMissing, key: nsName{ns, ref.Name}, port: ref.Port})
}

// backendMissingOf is backendMissing for Service key and port.
func (r *renderer) backendMissingOf(key nsName, port int32) string {
	s := r.idx.services.get(key)
	if s == nil {
		return fmt.Sprintf("Service %s/%s not found: the member's route is published and serves once it exists", key.namespace, key.name)
	}
	if translate.ServicePort(s, port) == nil {
		return fmt.Sprintf("Service %s/%s has no TCP port %d: the member's route is published and serves once it has", key.namespace, key.name, port)
	}
	return ""
}

// members renders the routes, AccessPolicies, probe targets and status of an accepted
// exposure's members (build.exposure calls it after the exposure's own route).
func (b *build) members(in exposureInput, e engine.Engine, l *dbListener, plans []memberPlan, x *Exposure, anchor, ca string) {
	d := in.d
	if len(plans) == 0 {
		return
	}
	x.engine = e
	parent := b.parentRef(l.name)
	for _, p := range plans {
		ms := v1alpha1.MemberStatus{Name: p.m.Name, Hostnames: p.hosts, Reason: p.reason, Message: p.msg}
		if p.hosts != nil {
			ms.Route = p.route
			m := metav1.ObjectMeta{Name: p.route, Namespace: d.Namespace, Labels: map[string]string{
				LabelDatabaseExposure: d.Name, LabelDatabaseMember: p.m.Name, LabelTenantGateway: b.t.Name, engine.Label: string(e.Name),
			}, OwnerReferences: exposureOwner(d)}
			recipe := routeRecipe{uid: d.UID, engine: e.Name, tenant: b.t.Name, parentNS: b.t.Namespace, parent: b.t.Name, viaSet: b.t.Spec.ParentGatewayRef != nil,
				listener: l.name, protocol: l.protocol, backend: p.m.BackendRef.Name, backendPort: p.m.BackendRef.Port,
				hosts: joinHosts(p.hosts), namespace: d.Namespace, name: p.route, member: p.m.Name}
			b.tlsRoute(m, recipe, parent, p.hosts, p.m.BackendRef)
			b.exposureAccess(d, m, "TLSRoute")
			if ref := d.Spec.CertificateRef; ref != nil {
				b.certNames = append(b.certNames, CertificateNames{Namespace: d.Namespace, Name: ref.Name, Hostnames: p.hosts})
			}
			x.MemberTargets = append(x.MemberTargets, &ProbeTarget{Route: p.route, Engine: d.Spec.Engine, Service: p.m.BackendRef.Name,
				ServicePort: p.m.BackendRef.Port, Hostnames: p.hosts, TrustAnchor: anchor, CertificateSecret: x.Target.CertificateSecret})
			if pa := b.r.probe(d.Namespace, p.route); pa.probed {
				ms.Certificate, ms.Endpoints = pa.probe.Reason, pa.probe.Endpoints
			} else {
				ms.Certificate = v1alpha1.ReasonProbePending
			}
		}
		x.Status.Members = append(x.Status.Members, ms)
	}
	b.r.membersCondition(x)
	var seeds []string
	for _, ms := range x.Status.Members {
		if ms.Route != "" {
			seeds = append(seeds, ms.Hostnames[0])
		}
	}
	x.Status.Connect = e.ConnectCluster(x.Status.Hostnames[0], seeds, l.port, in.d.Spec.BackendRef.Port, ca)
}

// membersCondition sets MembersAccepted from status.members: True when every member is
// published with its Service, else the first failing member's reason, naming each.
func (r *renderer) membersCondition(x *Exposure) { setMembersCondition(x, r.opts.Now) }

func setMembersCondition(x *Exposure, now func() metav1.Time) {
	if len(x.Status.Members) == 0 {
		return
	}
	c := metav1.Condition{Type: v1alpha1.ConditionMembersAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAccepted,
		ObservedGeneration: x.Status.ObservedGeneration}
	var bad, names []string
	for _, ms := range x.Status.Members {
		names = append(names, ms.Name)
		if ms.Reason == v1alpha1.ReasonAccepted {
			continue
		}
		if c.Status == metav1.ConditionTrue {
			c.Status, c.Reason = metav1.ConditionFalse, ms.Reason
		}
		bad = append(bad, fmt.Sprintf("%s: %s: %s", ms.Name, ms.Reason, ms.Message))
	}
	if len(bad) > 0 {
		c.Message = fmt.Sprintf("%d of %d members not serving (%s); the bootstrap name and the other members serve", len(bad), len(names), strings.Join(bad, "; "))
	} else {
		c.Message = fmt.Sprintf("%d members published, each with a route of its own: %s", len(names), strings.Join(names, ", "))
		if x.engine.Discovers() {
			c.Message += "; " + x.engine.Advertise
		} else {
			c.Message += fmt.Sprintf("; %s clients do not discover nodes, so a member is only a name of its own for a client that picks that node", x.engine.Name)
		}
	}
	conditions.Set(&x.Status.Conditions, x.stored, c, now)
}

// memberVerdicts folds the members' certificate verdicts into CertificateVerified, which
// probeCondition set from the exposure's own route: a client that reached the bootstrap name
// reconnects to every member, so the exposure verifies only when each member does too.
func (r *renderer) memberVerdicts(x *Exposure, d *v1alpha1.DatabaseExposure) {
	c := meta.FindStatusCondition(x.Status.Conditions, v1alpha1.ConditionCertificateVerified)
	if c == nil || c.Status != metav1.ConditionTrue {
		return // the bootstrap route's own verdict comes first
	}
	var pending, bad []string
	reason := ""
	for _, ms := range x.Status.Members {
		switch ms.Certificate {
		case "", v1alpha1.ReasonVerified:
		case v1alpha1.ReasonProbePending:
			pending = append(pending, ms.Name)
		default:
			if reason == "" {
				reason = ms.Certificate
			}
			msg := ""
			if pa := r.probe(x.Namespace, ms.Route); pa.probed {
				msg = ": " + pa.probe.Message
			}
			bad = append(bad, fmt.Sprintf("member %s (%s)%s", ms.Name, ms.Certificate, msg))
		}
	}
	switch {
	case len(bad) > 0:
		r.exposureCondition(x, d, v1alpha1.ConditionCertificateVerified, false, reason,
			fmt.Sprintf("the bootstrap name verifies, but clients reconnect to every member: %s", strings.Join(bad, "; ")))
	case len(pending) > 0:
		r.exposureCondition(x, d, v1alpha1.ConditionCertificateVerified, false, v1alpha1.ReasonProbePending,
			fmt.Sprintf("the bootstrap name verifies; members %s have not been probed yet", strings.Join(pending, ", ")))
	}
}

// completeMembers checks, once translate has run, that each published member's route was
// accepted on its listener; one that was not is NotProgrammed, with translate's reason.
func completeMembers(x *Exposure, st *translate.Status, now func() metav1.Time) {
	changed := false
	for i := range x.Status.Members {
		ms := &x.Status.Members[i]
		if ms.Route == "" || ms.Reason != v1alpha1.ReasonAccepted {
			continue
		}
		rs := st.TLSRoute(x.Namespace, ms.Route)
		if rs == nil {
			continue // not back from the API server yet: Programmed says the same of the exposure
		}
		for _, p := range rs.Parents {
			if a := meta.FindStatusCondition(p.Conditions, string(gwv1.RouteConditionAccepted)); a != nil && a.Status != metav1.ConditionTrue {
				ms.Reason, ms.Message = v1alpha1.ReasonNotProgrammed, "the route is not accepted: "+a.Reason+": "+a.Message
				changed = true
			}
		}
	}
	if changed {
		setMembersCondition(x, now)
	}
}

// exposureOwner is the controller ownerRef of what an exposure renders (none from files,
// where objects have no UID: the API server refuses an ownerRef without one).
func exposureOwner(d *v1alpha1.DatabaseExposure) []metav1.OwnerReference {
	if d.UID == "" {
		return nil
	}
	return []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "DatabaseExposure", Name: d.Name, UID: d.UID,
		Controller: ptr(true), BlockOwnerDeletion: ptr(true),
	}}
}
