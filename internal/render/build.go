package render

import (
	"cmp"
	"slices"
	"strings"

	acmev1 "github.com/cert-manager/cert-manager/pkg/apis/acme/v1"
	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/api/v1alpha1"
	"github.com/snigate/snigate/internal/translate"
)

// build assembles one TenantGateway's objects.
type build struct {
	r    *renderer
	t    *v1alpha1.TenantGateway // defaulted copy
	st   *Tenant
	tree tree

	gw      *gwv1.Gateway
	routes  []*gwv1.HTTPRoute
	issuers []*cmv1.Issuer
	certs   []*cmv1.Certificate
	// https lists the HTTPS listeners with the hostname each serves.
	https []httpsListener
	// The DatabaseExposures' routes and statuses.
	tlsRoutes      []*gwv1.TLSRoute
	tcpRoutes      []*gwv1.TCPRoute
	exposureStatus []Exposure
	// access are the AccessPolicies of the TenantGateway's and its exposures' spec.access.
	access    []*v1alpha1.AccessPolicy
	certNames []CertificateNames
}

type httpsListener struct {
	name, hostname, secret string
	// secretNS is the Secret's namespace when it is not the TenantGateway's ("" otherwise).
	secretNS string
}

// meta is the metadata of every rendered object: t's namespace, its label and, when t has a
// UID (it was read from a cluster), t as controller. An owner reference without a UID is
// refused by the API server, so objects rendered from files (snigate render, for GitOps)
// carry the label alone.
func (b *build) meta(name string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: name, Namespace: b.t.Namespace,
		Labels: map[string]string{LabelTenantGateway: b.t.Name},
	}
	if b.t.UID != "" {
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "TenantGateway", Name: b.t.Name, UID: b.t.UID,
			Controller: ptr(true), BlockOwnerDeletion: ptr(true),
		}}
	}
	return m
}

// fromTree allows kind from the tenant tree's namespaces.
func (b *build) fromTree(kind gwv1.Kind) *gwv1.AllowedRoutes {
	return fromNamespaces(kind, b.tree.namespaces)
}

func fromNamespaces(kind gwv1.Kind, names []string) *gwv1.AllowedRoutes {
	return &gwv1.AllowedRoutes{
		Namespaces: &gwv1.RouteNamespaces{
			From: ptr(gwv1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names,
			}}},
		},
		Kinds: []gwv1.RouteGroupKind{{Kind: kind}},
	}
}

// listeners builds the Gateway with every listener the spec and the routes assemble.
func (b *build) listeners() {
	t := b.t
	apex := t.Spec.Apex
	b.gw = &gwv1.Gateway{
		TypeMeta:   metav1.TypeMeta{APIVersion: gwv1.GroupVersion.String(), Kind: "Gateway"},
		ObjectMeta: b.meta(t.Name),
		Spec:       gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(t.Spec.GatewayClassName)},
	}
	// No application is served on port 80: only the redirect and cert-manager's challenges.
	b.gw.Annotations = map[string]string{translate.PlaintextListenersAnnotation: "http"}
	if owners := b.hostnameOwners(); owners != "" {
		b.gw.Annotations[translate.HostnameOwnersAnnotation] = owners
	}
	add := func(l gwv1.Listener) { b.gw.Spec.Listeners = append(b.gw.Spec.Listeners, l) }
	plain := fromNamespaces("HTTPRoute", uniqueSorted(t.Namespace, b.r.opts.CertManagerNamespace))
	if t.Spec.ParentGatewayRef == nil {
		add(gwv1.Listener{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType, AllowedRoutes: plain})
	} else {
		// On a shared Gateway every tenant's port 80 listener needs hostnames of its own.
		add(gwv1.Listener{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr(gwv1.Hostname(apex)), AllowedRoutes: plain})
		add(gwv1.Listener{Name: "http-sub", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr(gwv1.Hostname("*." + apex)), AllowedRoutes: plain.DeepCopy()})
		b.gw.Annotations[translate.PlaintextListenersAnnotation] = "http,http-sub"
	}

	mode := t.Spec.Certificates.Mode
	switch mode {
	case v1alpha1.CertificatesHTTP01:
		for _, h := range b.httpHostnames() {
			name := listenerName(h)
			b.https = append(b.https, httpsListener{name: name, hostname: h, secret: t.Name + "-" + name + "-tls"})
		}
	default:
		secret, secretNS := t.Name+"-wildcard-tls", ""
		if mode == v1alpha1.CertificatesExistingSecret {
			secret = t.Spec.Certificates.WildcardSecretRef.Name
			if ns := wildcardNamespace(t); ns != t.Namespace {
				secretNS = ns
			}
		}
		b.https = append(b.https, httpsListener{"https", "*." + apex, secret, secretNS}, httpsListener{"https-apex", apex, secret, secretNS})
		for _, c := range b.tree.children {
			b.https = append(b.https, httpsListener{listenerName("*." + c.apex), "*." + c.apex, secret, secretNS})
		}
	}
	for _, h := range b.https {
		ref := gwv1.SecretObjectReference{Name: gwv1.ObjectName(h.secret)}
		if h.secretNS != "" {
			ref.Namespace = ptr(gwv1.Namespace(h.secretNS))
		}
		add(gwv1.Listener{
			Name: gwv1.SectionName(h.name), Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: ptr(gwv1.Hostname(h.hostname)),
			TLS: &gwv1.ListenerTLSConfig{
				Mode:            ptr(gwv1.TLSModeTerminate),
				CertificateRefs: []gwv1.SecretObjectReference{ref},
			},
			AllowedRoutes: b.fromTree("HTTPRoute"),
		})
	}
	for _, svc := range t.Spec.TLSPassthroughServices {
		add(gwv1.Listener{
			Name: gwv1.SectionName("tls-" + svc), Port: 443, Protocol: gwv1.TLSProtocolType,
			Hostname:      ptr(gwv1.Hostname(svc + "." + apex)),
			TLS:           &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)},
			AllowedRoutes: b.fromTree("TLSRoute"),
		})
	}
	for _, pl := range t.Spec.TLSPassthroughListeners {
		add(gwv1.Listener{
			Name: gwv1.SectionName("tls-" + pl.Name), Port: gwv1.PortNumber(pl.Port), Protocol: gwv1.TLSProtocolType,
			Hostname: ptr(gwv1.Hostname(pl.Hostname)),
			TLS:      &gwv1.ListenerTLSConfig{Mode: ptr(gwv1.TLSModePassthrough)},
			// A native-port listener is the tenant namespace's alone, not its children's.
			AllowedRoutes: &gwv1.AllowedRoutes{
				Namespaces: &gwv1.RouteNamespaces{From: ptr(gwv1.NamespacesFromSame)},
				Kinds:      []gwv1.RouteGroupKind{{Kind: "TLSRoute"}},
			},
		})
	}
}

// httpHostnames are the hostnames of the tree's HTTPRoutes attached to t's Gateway that lie
// inside the tenant's apex or a child's, sorted and distinct. TLSRoute hostnames never get
// an HTTPS listener: their backend terminates.
func (b *build) httpHostnames() []string {
	var hosts []string
	for _, h := range b.treeHTTPRoutes() {
		if !attaches(h.Namespace, h.Spec.ParentRefs, b.t) {
			continue
		}
		if ownedBy(h, b.t) {
			continue // the redirect
		}
		for _, hn := range h.Spec.Hostnames {
			if s := string(hn); s == b.t.Spec.Apex || strings.HasSuffix(s, "."+b.t.Spec.Apex) {
				hosts = append(hosts, s)
			}
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// treeHTTPRoutes are the HTTPRoutes of the tree's namespaces.
func (b *build) treeHTTPRoutes() []*gwv1.HTTPRoute {
	var out []*gwv1.HTTPRoute
	for _, ns := range b.tree.namespaces {
		out = append(out, b.r.ask(question{kind: qHTTPRoutes, key: nsName{namespace: ns}}).([]*gwv1.HTTPRoute)...)
	}
	return out
}

// attaches reports whether parentRefs of a route in namespace ns name t's Gateway (its
// ListenerSet, with spec.parentGatewayRef).
func attaches(ns string, refs []gwv1.ParentReference, t *v1alpha1.TenantGateway) bool {
	return attachesTo(ns, refs, keyOf(t), t.Spec.ParentGatewayRef != nil)
}

// hostnameOwners decides, for each hostname that routes of more than one namespace of the
// tree claim on this Gateway, which route owns it: a route of an attached (platform)
// namespace over a tenant's, then the older route, then namespace/name. Routes of one
// namespace never conflict with each other: only other namespaces' routes lose. The result
// is translate.HostnameOwnersAnnotation's value ("" when nothing is contested).
func (b *build) hostnameOwners() string {
	type claim struct {
		ns, kind, name string
		created        metav1.Time
		platform       bool
	}
	platform := map[string]bool{}
	for _, ns := range b.t.Spec.AttachedNamespaces {
		platform[ns] = true
	}
	claims := map[string][]claim{}
	add := func(m metav1.ObjectMeta, kind string, refs []gwv1.ParentReference, hosts []gwv1.Hostname) {
		if !attaches(m.Namespace, refs, b.t) || m.Labels[LabelTenantGateway] == b.t.Name {
			return
		}
		for _, h := range hosts {
			claims[strings.ToLower(string(h))] = append(claims[strings.ToLower(string(h))],
				claim{m.Namespace, kind, m.Name, m.CreationTimestamp, platform[m.Namespace]})
		}
	}
	for _, h := range b.treeHTTPRoutes() {
		add(h.ObjectMeta, "HTTPRoute", h.Spec.ParentRefs, h.Spec.Hostnames)
	}
	for _, ns := range b.tree.namespaces {
		for _, tr := range b.r.ask(question{kind: qClaimTLSRoutes, key: nsName{namespace: ns}, owner: keyOf(b.t), flag: b.t.Spec.ParentGatewayRef != nil}).([]*gwv1.TLSRoute) {
			add(tr.ObjectMeta, "TLSRoute", tr.Spec.ParentRefs, tr.Spec.Hostnames)
		}
	}
	var entries []string
	for host, cs := range claims {
		if !slices.ContainsFunc(cs, func(c claim) bool { return c.ns != cs[0].ns }) {
			continue
		}
		w := slices.MinFunc(cs, func(a, c claim) int {
			if a.platform != c.platform {
				if a.platform {
					return -1
				}
				return 1
			}
			return cmp.Or(a.created.Compare(c.created.Time), strings.Compare(a.ns, c.ns),
				strings.Compare(a.kind, c.kind), strings.Compare(a.name, c.name))
		})
		entries = append(entries, host+"="+w.ns+"/"+w.kind+"/"+w.name)
	}
	slices.Sort(entries)
	return strings.Join(entries, ",")
}

// parentRef is a rendered route's parentRef to the listener named section: of the
// TenantGateway's Gateway, or of its ListenerSet (spec.parentGatewayRef).
func (b *build) parentRef(section string) gwv1.ParentReference {
	ref := gwv1.ParentReference{Name: gwv1.ObjectName(b.t.Name), Namespace: ptr(gwv1.Namespace(b.t.Namespace)), SectionName: ptr(gwv1.SectionName(section))}
	if b.t.Spec.ParentGatewayRef != nil {
		ref.Group, ref.Kind = ptr(gwv1.Group(gwv1.GroupName)), ptr(gwv1.Kind("ListenerSet"))
	}
	return ref
}

// plainParents are the parentRefs of the port 80 listeners: http, and http-sub on a shared
// Gateway.
func (b *build) plainParents() []gwv1.ParentReference {
	if b.t.Spec.ParentGatewayRef == nil {
		return []gwv1.ParentReference{{Name: gwv1.ObjectName(b.t.Name), SectionName: ptr(gwv1.SectionName("http"))}}
	}
	return []gwv1.ParentReference{b.parentRef("http"), b.parentRef("http-sub")}
}

// listenerSet is the Gateway built, as a ListenerSet on spec.parentGatewayRef.
func (b *build) listenerSet() *gwv1.ListenerSet {
	ref := b.t.Spec.ParentGatewayRef
	ls := &gwv1.ListenerSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: gwv1.GroupVersion.String(), Kind: "ListenerSet"},
		ObjectMeta: *b.gw.ObjectMeta.DeepCopy(),
		Spec: gwv1.ListenerSetSpec{ParentRef: gwv1.ParentGatewayReference{
			Group: ptr(gwv1.Group(gwv1.GroupName)), Kind: ptr(gwv1.Kind("Gateway")),
			Name: gwv1.ObjectName(ref.Name), Namespace: ptr(gwv1.Namespace(ref.Namespace)),
		}},
	}
	delete(ls.Annotations, translate.HostnameOwnersAnnotation) // read on Gateways only
	for _, l := range b.gw.Spec.Listeners {
		ls.Spec.Listeners = append(ls.Spec.Listeners, gwv1.ListenerEntry{Name: l.Name, Hostname: l.Hostname, Port: l.Port,
			Protocol: l.Protocol, TLS: l.TLS, AllowedRoutes: l.AllowedRoutes})
	}
	return ls
}

// redirect is the http listener's route: every request to the tenant's names, 301 to https.
func (b *build) redirect() {
	apex := b.t.Spec.Apex
	b.routes = append(b.routes, &gwv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gwv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: b.meta(redirectName(b.t)),
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: b.plainParents()},
			Hostnames:       []gwv1.Hostname{gwv1.Hostname(apex), gwv1.Hostname("*." + apex)},
			Rules: []gwv1.HTTPRouteRule{{
				Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr("/")}}},
				Filters: []gwv1.HTTPRouteFilter{{
					Type:            gwv1.HTTPRouteFilterRequestRedirect,
					RequestRedirect: &gwv1.HTTPRequestRedirectFilter{Scheme: ptr("https"), StatusCode: ptr(301)},
				}},
			}},
		},
	})
}

// certificates renders the cert-manager objects of the mode, and holds the HTTPS listeners
// that cannot be ready.
func (b *build) certificates() {
	t := b.t
	c := t.Spec.Certificates
	if c.Mode == v1alpha1.CertificatesExistingSecret {
		return
	}
	hold := func(reason string) {
		for _, h := range b.https {
			if _, held := b.st.held[h.name]; !held {
				b.st.held[h.name] = reason
			}
		}
	}
	if !b.r.opts.CertManager {
		hold(b.r.opts.NoCertManagerReason)
	}
	var issuer cmmeta.IssuerReference
	switch {
	case c.IssuerRef != nil:
		issuer = *c.IssuerRef
		if issuer.Kind == "" {
			issuer.Kind = cmv1.IssuerKind
		}
		if issuer.Group == "" {
			issuer.Group = "cert-manager.io"
		}
	case c.ACME != nil && (c.Mode == v1alpha1.CertificatesHTTP01 || c.DNS01 != nil):
		name := t.Name + "-acme"
		solver := acmev1.ACMEChallengeSolver{}
		if c.Mode == v1alpha1.CertificatesHTTP01 {
			parents := []gwv1.ParentReference{{
				Name: gwv1.ObjectName(t.Name), Namespace: ptr(gwv1.Namespace(t.Namespace)), SectionName: ptr(gwv1.SectionName("http")),
			}}
			if t.Spec.ParentGatewayRef != nil {
				parents = b.plainParents()
			}
			solver.HTTP01 = &acmev1.ACMEChallengeSolverHTTP01{GatewayHTTPRoute: &acmev1.ACMEChallengeSolverHTTP01GatewayHTTPRoute{
				ParentRefs: parents,
			}}
		} else {
			solver.DNS01 = c.DNS01.DeepCopy()
		}
		b.issuers = append(b.issuers, &cmv1.Issuer{
			TypeMeta:   metav1.TypeMeta{APIVersion: cmv1.SchemeGroupVersion.String(), Kind: cmv1.IssuerKind},
			ObjectMeta: b.meta(name),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{ACME: &acmev1.ACMEIssuer{
				Server: c.ACME.Server, Email: c.ACME.Email, CABundle: c.ACME.CABundle,
				PrivateKey: cmmeta.SecretKeySelector{LocalObjectReference: cmmeta.LocalObjectReference{Name: name + "-account"}},
				Solvers:    []acmev1.ACMEChallengeSolver{solver},
			}}},
		})
		issuer = cmmeta.IssuerReference{Name: name, Kind: cmv1.IssuerKind, Group: "cert-manager.io"}
	default:
		hold(v1alpha1.ReasonNoIssuer)
		return
	}
	cert := func(name, secret string, dnsNames []string) {
		b.certs = append(b.certs, &cmv1.Certificate{
			TypeMeta:   metav1.TypeMeta{APIVersion: cmv1.SchemeGroupVersion.String(), Kind: cmv1.CertificateKind},
			ObjectMeta: b.meta(name),
			Spec:       cmv1.CertificateSpec{SecretName: secret, DNSNames: dnsNames, IssuerRef: issuer},
		})
	}
	if c.Mode == v1alpha1.CertificatesDNS01 {
		names := []string{t.Spec.Apex, "*." + t.Spec.Apex}
		for _, ch := range b.tree.children {
			names = append(names, "*."+ch.apex)
		}
		cert(t.Name+"-wildcard", t.Name+"-wildcard-tls", names)
	} else {
		for _, h := range b.https {
			if strings.HasPrefix(h.hostname, "*.") {
				// An HTTP-01 challenge cannot prove a wildcard name.
				b.st.held[h.name] = v1alpha1.ReasonWildcardNeedsDNS01
				continue
			}
			cert(t.Name+"-"+h.name, h.secret, []string{h.hostname})
		}
	}
	// Until cert-manager has written a Certificate's Secret, its listeners say so rather
	// than the Gateway listener's InvalidCertificateRef.
	for _, h := range b.https {
		if _, held := b.st.held[h.name]; !held && !b.r.askBool(question{kind: qSecretExists, key: nsName{t.Namespace, h.secret}}) {
			b.st.held[h.name] = v1alpha1.ReasonCertificatePending
		}
	}
}

// listenerStatus is the status of each listener as rendered: not ready until Complete sees
// it programmed.
func (b *build) listenerStatus() []v1alpha1.TenantListenerStatus {
	secret := map[string]string{}
	for _, h := range b.https {
		secret[h.name] = h.secret
		if h.secretNS != "" {
			secret[h.name] = h.secretNS + "/" + h.secret
		}
	}
	var out []v1alpha1.TenantListenerStatus
	for _, l := range b.gw.Spec.Listeners {
		ls := v1alpha1.TenantListenerStatus{Name: string(l.Name), Port: int32(l.Port), Certificate: secret[string(l.Name)]}
		if l.Hostname != nil {
			ls.Hostname = string(*l.Hostname)
		}
		ls.Reason = b.st.held[string(l.Name)]
		out = append(out, ls)
	}
	return out
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func uniqueSorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func ptr[T any](v T) *T { return &v }
