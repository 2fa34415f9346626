package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/snigate/snigate/internal/resources"
)

// InputError is input that the Gateway API CRD validation would have refused: the whole
// configuration is rejected. It names where the object came from, the object and the field.
type InputError struct {
	// Origin is where the object was read ("dir/file.yaml#2"); empty for API objects.
	Origin    string
	Kind      string
	Namespace string
	Name      string
	// Field is the path of the offending field ("spec.hostnames[0]").
	Field   string
	Message string
}

func (e *InputError) Error() string {
	obj := e.Kind + " "
	if e.Namespace != "" {
		obj += e.Namespace + "/"
	}
	obj += e.Name
	s := ""
	if e.Origin != "" {
		s = resources.DescribeOrigin(e.Origin) + " (" + obj + "): "
	} else {
		s = obj + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Message
}

// indexed is field[i]: fmt.Sprintf was a tenth of validating 6 000 routes, time that every
// load spends before it serves (docs/performance.md, route scale: serving 100 000 hostnames
// within 0.3 s of start).
func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// validator collects InputErrors for one object.
type validator struct {
	in   *resources.Resources
	errs []error
	kind string
	ns   string
	name string
}

func (v *validator) object(kind, ns, name string) {
	v.kind, v.ns, v.name = kind, ns, name
}

func (v *validator) errorf(field, format string, args ...any) {
	v.errs = append(v.errs, &InputError{
		Origin:    v.in.Origin(v.kind, v.ns, v.name),
		Kind:      v.kind,
		Namespace: v.ns,
		Name:      v.name,
		Field:     field,
		Message:   fmt.Sprintf(format, args...),
	})
}

func (v *validator) items(field string, n, minItems, maxItems int) {
	switch {
	case n < minItems && minItems == 1:
		v.errorf(field, "required: at least 1 item")
	case n < minItems:
		v.errorf(field, "must have at least %d items", minItems)
	case n > maxItems:
		v.errorf(field, "must have at most %d item(s), has %d", maxItems, n)
	}
}

func (v *validator) port(field string, p int32) {
	if p < 1 || p > 65535 {
		v.errorf(field, "port %d out of range 1-65535", p)
	}
}

func (v *validator) pattern(field, value string, ok bool, what string) {
	if !ok {
		v.errorf(field, "%q is not a valid %s", value, what)
	}
}

// validate checks what the CRDs' OpenAPI and CEL rules (and the API server for core objects)
// would check. Objects of other controllers are checked too: in a cluster they could not
// exist either.
//
// Routes found valid before (memo) are not checked again: objects never change, and a route's
// checks look at the route alone.
func validate(in *resources.Resources, memo *Memo) []error {
	v := &validator{in: in}
	for _, c := range byName(in.GatewayClasses) {
		v.object("GatewayClass", "", c.Name)
		cn := string(c.Spec.ControllerName)
		if cn == "" {
			v.errorf("spec.controllerName", "required")
		} else {
			v.pattern("spec.controllerName", cn, controllerRE.MatchString(cn) && len(cn) <= 253, "controller name (domain/path)")
		}
	}
	for _, g := range byName(in.Gateways) {
		v.object(kindGateway, g.Namespace, g.Name)
		v.gateway(g)
	}
	for _, r := range byName(unvalidated(in.TLSRoutes, memo)) {
		n := len(v.errs)
		v.object(kindTLSRoute, r.Namespace, r.Name)
		v.tlsRoute(r)
		memo.validated(r, len(v.errs) == n)
	}
	for _, r := range byName(unvalidated(in.TCPRoutes, memo)) {
		n := len(v.errs)
		v.object(kindTCPRoute, r.Namespace, r.Name)
		v.tcpRoute(r)
		memo.validated(r, len(v.errs) == n)
	}
	for _, r := range byName(unvalidated(in.HTTPRoutes, memo)) {
		n := len(v.errs)
		v.object(kindHTTPRoute, r.Namespace, r.Name)
		v.httpRoute(r)
		memo.validated(r, len(v.errs) == n)
	}
	for _, g := range byName(in.ReferenceGrants) {
		v.object("ReferenceGrant", g.Namespace, g.Name)
		v.items("spec.from", len(g.Spec.From), 1, 16)
		v.items("spec.to", len(g.Spec.To), 1, 16)
		for i, f := range g.Spec.From {
			field := fmt.Sprintf("spec.from[%d]", i)
			v.pattern(field+".group", string(f.Group), groupRE.MatchString(string(f.Group)), "group")
			v.kindField(field+".kind", string(f.Kind))
			v.pattern(field+".namespace", string(f.Namespace), isLabel(string(f.Namespace)), "namespace")
		}
		for i, to := range g.Spec.To {
			field := fmt.Sprintf("spec.to[%d]", i)
			v.pattern(field+".group", string(to.Group), groupRE.MatchString(string(to.Group)), "group")
			v.kindField(field+".kind", string(to.Kind))
		}
	}
	return v.errs
}

// byName returns objects sorted by namespace/name, so errors come out in a stable order.
func byName[T interface {
	GetNamespace() string
	GetName() string
}](objs []T) []T {
	objs = slices.Clone(objs)
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return objs
}

// hostnames checks a route's spec.hostnames: between lo and hi of them, each a valid
// (possibly wildcard) hostname.
func (v *validator) hostnames(hs []gwv1.Hostname, lo, hi int) {
	v.items("spec.hostnames", len(hs), lo, hi)
	for i, h := range hs {
		if p := hostnameProblem(string(h), true); p != "" {
			v.errorf(fmt.Sprintf("spec.hostnames[%d]", i), "%q %s", h, p)
		}
	}
}

func (v *validator) tlsRoute(r *gwv1.TLSRoute) {
	v.parentRefs(r.Spec.ParentRefs)
	v.hostnames(r.Spec.Hostnames, 1, 1024)
	v.items("spec.rules", len(r.Spec.Rules), 1, 1)
	for i, rule := range r.Spec.Rules {
		v.backendRefs(indexed("spec.rules", i)+".backendRefs", rule.BackendRefs)
	}
}

func (v *validator) tcpRoute(r *gwv1.TCPRoute) {
	v.parentRefs(r.Spec.ParentRefs)
	v.items("spec.rules", len(r.Spec.Rules), 1, 1)
	for i, rule := range r.Spec.Rules {
		v.backendRefs(indexed("spec.rules", i)+".backendRefs", rule.BackendRefs)
	}
}

func (v *validator) kindField(field, kind string) {
	if kind == "" {
		v.errorf(field, "required")
		return
	}
	v.pattern(field, kind, kindRE.MatchString(kind) && len(kind) <= 63, "kind")
}

func (v *validator) gateway(g *gwv1.Gateway) {
	if g.Spec.GatewayClassName == "" {
		v.errorf("spec.gatewayClassName", "required")
	}
	ls := g.Spec.Listeners
	v.items("spec.listeners", len(ls), 1, 64)
	names := map[gwv1.SectionName]int{}
	type combo struct {
		port     gwv1.PortNumber
		protocol gwv1.ProtocolType
		hostname string
		set      bool
	}
	combos := map[combo]int{}
	for i := range ls {
		l := &ls[i]
		f := fmt.Sprintf("spec.listeners[%d]", i)
		switch {
		case l.Name == "":
			v.errorf(f+".name", "required")
		case !isSubdomain(string(l.Name)) || len(l.Name) > 253:
			v.errorf(f+".name", "%q is not a valid listener name (lower-case RFC 1123 subdomain)", l.Name)
		default:
			if j, dup := names[l.Name]; dup {
				v.errorf(f+".name", "duplicate listener name %q (also spec.listeners[%d])", l.Name, j)
			}
			names[l.Name] = i
		}
		v.port(f+".port", l.Port)
		p := l.Protocol
		switch {
		case p == "":
			v.errorf(f+".protocol", "required")
		case !protocolRE.MatchString(string(p)) || len(p) > 255:
			v.errorf(f+".protocol", "%q is not a valid protocol", p)
		}
		if l.Hostname != nil {
			if pr := hostnameProblem(string(*l.Hostname), false); pr != "" {
				v.errorf(f+".hostname", "%q %s", *l.Hostname, pr)
			}
			if p == gwv1.TCPProtocolType || p == gwv1.UDPProtocolType {
				v.errorf(f+".hostname", "must not be specified for protocol %s", p)
			}
		}
		c := combo{port: l.Port, protocol: p}
		if l.Hostname != nil {
			c.hostname, c.set = string(*l.Hostname), true
		}
		if j, dup := combos[c]; dup {
			v.errorf(f, "port, protocol and hostname are the same as spec.listeners[%d]: each listener must differ in at least one", j)
		} else {
			combos[c] = i
		}
		v.listenerTLS(f, l)
		if ar := l.AllowedRoutes; ar != nil {
			if ar.Namespaces != nil && ar.Namespaces.From != nil {
				switch *ar.Namespaces.From {
				case gwv1.NamespacesFromAll, gwv1.NamespacesFromSame, gwv1.NamespacesFromSelector:
				default:
					v.errorf(f+".allowedRoutes.namespaces.from", "%q is not one of All, Same, Selector", *ar.Namespaces.From)
				}
			}
			v.items(f+".allowedRoutes.kinds", len(ar.Kinds), 0, 8)
			for j, k := range ar.Kinds {
				kf := fmt.Sprintf("%s.allowedRoutes.kinds[%d]", f, j)
				if k.Group != nil {
					v.pattern(kf+".group", string(*k.Group), groupRE.MatchString(string(*k.Group)), "group")
				}
				v.kindField(kf+".kind", string(k.Kind))
			}
		}
	}
	v.items("spec.addresses", len(g.Spec.Addresses), 0, 16)
	seenIP := map[netip.Addr]int{}
	for i, a := range g.Spec.Addresses {
		f := fmt.Sprintf("spec.addresses[%d]", i)
		typ := gwv1.IPAddressType
		if a.Type != nil {
			typ = *a.Type
			v.pattern(f+".type", string(typ), addressTypeRE.MatchString(string(typ)), "address type")
		}
		switch typ {
		case gwv1.IPAddressType:
			if a.Value == "" {
				continue
			}
			ip, err := netip.ParseAddr(a.Value)
			if err != nil || ip.Zone() != "" {
				v.errorf(f+".value", "%q is not an IP address", a.Value)
				continue
			}
			if j, dup := seenIP[ip]; dup {
				v.errorf(f+".value", "IPAddress values must be unique (also spec.addresses[%d])", j)
			}
			seenIP[ip] = i
		case gwv1.HostnameAddressType:
			if a.Value != "" && hostnameProblem(a.Value, false) != "" {
				v.errorf(f+".value", "%q is not a valid hostname", a.Value)
			}
		}
	}
}

func (v *validator) listenerTLS(f string, l *gwv1.Listener) {
	p := l.Protocol
	if l.TLS == nil {
		if p == gwv1.TLSProtocolType {
			v.errorf(f+".tls", "required for protocol TLS (with tls.mode Passthrough or Terminate)")
		}
		return
	}
	tf := f + ".tls"
	switch p {
	case gwv1.HTTPProtocolType, gwv1.TCPProtocolType, gwv1.UDPProtocolType:
		v.errorf(tf, "must not be specified for protocol %s", p)
		return
	}
	mode := gwv1.TLSModeTerminate // CRD default
	if l.TLS.Mode != nil {
		mode = *l.TLS.Mode
	}
	switch mode {
	case gwv1.TLSModeTerminate, gwv1.TLSModePassthrough:
	default:
		v.errorf(tf+".mode", "%q is not one of Terminate, Passthrough", mode)
	}
	if p == gwv1.TLSProtocolType && (l.TLS.Mode == nil || *l.TLS.Mode == "") {
		v.errorf(tf+".mode", "required for protocol TLS (Passthrough or Terminate)")
	}
	if p == gwv1.HTTPSProtocolType && mode != gwv1.TLSModeTerminate {
		v.errorf(tf+".mode", "must be Terminate for protocol HTTPS")
	}
	if mode == gwv1.TLSModeTerminate && len(l.TLS.CertificateRefs) == 0 && len(l.TLS.Options) == 0 {
		v.errorf(tf+".certificateRefs", "required when tls.mode is Terminate (or tls.options)")
	}
	v.items(tf+".certificateRefs", len(l.TLS.CertificateRefs), 0, 64)
	for i, ref := range l.TLS.CertificateRefs {
		rf := fmt.Sprintf("%s.certificateRefs[%d]", tf, i)
		if ref.Name == "" {
			v.errorf(rf+".name", "required")
		}
		if ref.Namespace != nil {
			v.pattern(rf+".namespace", string(*ref.Namespace), isLabel(string(*ref.Namespace)), "namespace")
		}
	}
	v.items(tf+".options", len(l.TLS.Options), 0, 16)
}

func (v *validator) parentRefs(refs []gwv1.ParentReference) {
	v.items("spec.parentRefs", len(refs), 0, 32)
	type parent struct{ group, kind, ns, name string }
	key := func(r gwv1.ParentReference) parent {
		p := parent{group: groupGateway, kind: kindGateway, name: string(r.Name)}
		if r.Group != nil {
			p.group = string(*r.Group)
		}
		if r.Kind != nil {
			p.kind = string(*r.Kind)
		}
		if r.Namespace != nil {
			p.ns = string(*r.Namespace)
		}
		return p
	}
	for i, r := range refs {
		f := indexed("spec.parentRefs", i)
		if r.Name == "" {
			v.errorf(f+".name", "required")
		}
		if r.Namespace != nil {
			v.pattern(f+".namespace", string(*r.Namespace), isLabel(string(*r.Namespace)), "namespace")
		}
		if r.SectionName != nil {
			v.pattern(f+".sectionName", string(*r.SectionName), isSubdomain(string(*r.SectionName)), "section name")
		}
		if r.Port != nil {
			v.port(f+".port", *r.Port)
		}
		for j := range i {
			if key(refs[j]) != key(r) {
				continue
			}
			si, sj := sectionName(r), sectionName(refs[j])
			switch {
			case (si == "") != (sj == ""):
				v.errorf(f+".sectionName", "sectionName must be specified when parentRefs includes 2 or more references to the same parent (spec.parentRefs[%d])", j)
			case si == sj:
				v.errorf(f+".sectionName", "sectionName must be unique when parentRefs includes 2 or more references to the same parent (spec.parentRefs[%d])", j)
			}
		}
	}
}

func sectionName(r gwv1.ParentReference) string {
	if r.SectionName == nil {
		return ""
	}
	return string(*r.SectionName)
}

func (v *validator) backendRefs(field string, refs []gwv1.BackendRef) {
	v.items(field, len(refs), 1, 16)
	v.backendRefItems(field, refs)
}

func (v *validator) backendRefItems(field string, refs []gwv1.BackendRef) {
	for i, r := range refs {
		f := indexed(field, i)
		if r.Name == "" {
			v.errorf(f+".name", "required")
		}
		group, kind := "", kindService
		if r.Group != nil {
			group = string(*r.Group)
			v.pattern(f+".group", group, groupRE.MatchString(group), "group")
		}
		if r.Kind != nil {
			kind = string(*r.Kind)
			v.kindField(f+".kind", kind)
		}
		if r.Namespace != nil {
			v.pattern(f+".namespace", string(*r.Namespace), isLabel(string(*r.Namespace)), "namespace")
		}
		if r.Port == nil {
			if group == "" && kind == kindService {
				v.errorf(f+".port", "required for a Service reference")
			}
		} else {
			v.port(f+".port", *r.Port)
		}
		if r.Weight != nil && (*r.Weight < 0 || *r.Weight > 1000000) {
			v.errorf(f+".weight", "%d out of range 0-1000000", *r.Weight)
		}
	}
}

// pathValueRE is the character set the CRD allows in Exact and PathPrefix values.
var pathValueRE = regexp.MustCompile(`^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$`)

// headerNameRE is the HTTPHeaderName pattern (an RFC 7230 token).
var headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+\\-.^_\x60|~]+$")

// httpRoute checks what the HTTPRoute CRD's OpenAPI and CEL rules check.
func (v *validator) httpRoute(r *gwv1.HTTPRoute) {
	v.parentRefs(r.Spec.ParentRefs)
	v.hostnames(r.Spec.Hostnames, 0, 16)
	v.items("spec.rules", len(r.Spec.Rules), 0, 16)
	total := 0
	names := map[gwv1.SectionName]int{}
	for i, rule := range r.Spec.Rules {
		f := fmt.Sprintf("spec.rules[%d]", i)
		if rule.Name != nil {
			if j, dup := names[*rule.Name]; dup {
				v.errorf(f+".name", "rule name %q must be unique within the route (also spec.rules[%d])", *rule.Name, j)
			}
			names[*rule.Name] = i
		}
		v.items(f+".matches", len(rule.Matches), 0, 64)
		total += len(rule.Matches)
		for j, m := range rule.Matches {
			mf := fmt.Sprintf("%s.matches[%d]", f, j)
			if p := m.Path; p != nil {
				typ, value := pathMatch(p)
				switch typ {
				case gwv1.PathMatchExact, gwv1.PathMatchPathPrefix:
					v.pathValue(mf+".path.value", value)
				case gwv1.PathMatchRegularExpression:
				default:
					v.errorf(mf+".path.type", "%q is not one of Exact, PathPrefix, RegularExpression", typ)
				}
			}
			for k, h := range m.Headers {
				v.pattern(fmt.Sprintf("%s.headers[%d].name", mf, k), string(h.Name), headerNameRE.MatchString(string(h.Name)), "header name")
			}
			for k, q := range m.QueryParams {
				v.pattern(fmt.Sprintf("%s.queryParams[%d].name", mf, k), string(q.Name), headerNameRE.MatchString(string(q.Name)), "query parameter name")
			}
			if m.Method != nil {
				switch *m.Method {
				case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH":
				default:
					v.errorf(mf+".method", "%q is not an HTTP method the API allows", *m.Method)
				}
			}
		}
		v.items(f+".filters", len(rule.Filters), 0, 16)
		count := map[gwv1.HTTPRouteFilterType]int{}
		for j, flt := range rule.Filters {
			v.httpFilter(fmt.Sprintf("%s.filters[%d]", f, j), flt)
			count[flt.Type]++
		}
		for _, typ := range []gwv1.HTTPRouteFilterType{gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
			gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite, gwv1.HTTPRouteFilterCORS} {
			if count[typ] > 1 {
				v.errorf(f+".filters", "%s filter cannot be repeated", typ)
			}
		}
		if count[gwv1.HTTPRouteFilterRequestRedirect] > 0 && count[gwv1.HTTPRouteFilterURLRewrite] > 0 {
			v.errorf(f+".filters", "may specify either RequestRedirect or URLRewrite, but not both")
		}
		if count[gwv1.HTTPRouteFilterRequestRedirect] > 0 && len(rule.BackendRefs) > 0 {
			v.errorf(f, "RequestRedirect filter must not be used together with backendRefs")
		}
		for _, flt := range rule.Filters {
			if flt.RequestRedirect != nil && flt.RequestRedirect.Path != nil && flt.RequestRedirect.Path.Type == gwv1.PrefixMatchHTTPPathModifier {
				if len(rule.Matches) != 1 || rule.Matches[0].Path == nil || rule.Matches[0].Path.Type == nil || *rule.Matches[0].Path.Type != gwv1.PathMatchPathPrefix {
					v.errorf(f, "when using RequestRedirect filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified")
				}
			}
		}
		refs := make([]gwv1.BackendRef, len(rule.BackendRefs))
		for j := range rule.BackendRefs {
			refs[j] = rule.BackendRefs[j].BackendRef
		}
		v.items(f+".backendRefs", len(refs), 0, 16)
		v.backendRefItems(f+".backendRefs", refs)
	}
	if total > 128 {
		v.errorf("spec.rules", "the total number of matches across all rules must be at most 128, has %d", total)
	}
}

func (v *validator) pathValue(field, p string) {
	switch {
	case !strings.HasPrefix(p, "/"):
		v.errorf(field, "%q must be an absolute path and start with '/'", p)
	case strings.Contains(p, "//"), strings.Contains(p, "/./"), strings.Contains(p, "/../"), strings.Contains(p, "%2f"),
		strings.Contains(p, "%2F"), strings.Contains(p, "#"), strings.HasSuffix(p, "/.."), strings.HasSuffix(p, "/."):
		v.errorf(field, "%q must not contain '//', '/./', '/../', '%%2f', '#' nor end with '/.' or '/..'", p)
	case !pathValueRE.MatchString(p):
		v.errorf(field, "%q contains characters a path may not contain", p)
	}
}

func (v *validator) httpFilter(f string, flt gwv1.HTTPRouteFilter) {
	type field struct {
		typ gwv1.HTTPRouteFilterType
		set bool
	}
	fields := []field{
		{gwv1.HTTPRouteFilterRequestHeaderModifier, flt.RequestHeaderModifier != nil},
		{gwv1.HTTPRouteFilterResponseHeaderModifier, flt.ResponseHeaderModifier != nil},
		{gwv1.HTTPRouteFilterRequestMirror, flt.RequestMirror != nil},
		{gwv1.HTTPRouteFilterRequestRedirect, flt.RequestRedirect != nil},
		{gwv1.HTTPRouteFilterURLRewrite, flt.URLRewrite != nil},
		{gwv1.HTTPRouteFilterCORS, flt.CORS != nil},
		{gwv1.HTTPRouteFilterExternalAuth, flt.ExternalAuth != nil},
		{gwv1.HTTPRouteFilterExtensionRef, flt.ExtensionRef != nil},
	}
	if !slices.ContainsFunc(fields, func(x field) bool { return x.typ == flt.Type }) {
		v.errorf(f+".type", "%q is not a filter type", flt.Type)
		return
	}
	for _, x := range fields {
		typ, set := x.typ, x.set
		switch {
		case typ == flt.Type && !set:
			v.errorf(f, "the %s field must be specified for filter type %s", lowerFirst(string(typ)), typ)
		case typ != flt.Type && set:
			v.errorf(f, "the %s field must not be set when the filter type is %s", lowerFirst(string(typ)), flt.Type)
		}
	}
	for _, hm := range []*gwv1.HTTPHeaderFilter{flt.RequestHeaderModifier, flt.ResponseHeaderModifier} {
		if hm == nil {
			continue
		}
		for _, h := range append(slices.Clone(hm.Set), hm.Add...) {
			v.pattern(f+" header name", string(h.Name), headerNameRE.MatchString(string(h.Name)), "header name")
		}
	}
	if rd := flt.RequestRedirect; rd != nil {
		if rd.Scheme != nil && *rd.Scheme != "http" && *rd.Scheme != "https" {
			v.errorf(f+".requestRedirect.scheme", "%q is not one of http, https", *rd.Scheme)
		}
		if rd.StatusCode != nil && !slices.Contains([]int{301, 302, 303, 307, 308}, *rd.StatusCode) {
			v.errorf(f+".requestRedirect.statusCode", "%d is not one of 301, 302, 303, 307, 308", *rd.StatusCode)
		}
		if rd.Port != nil {
			v.port(f+".requestRedirect.port", *rd.Port)
		}
		if rd.Hostname != nil {
			if p := hostnameProblem(string(*rd.Hostname), false); p != "" || strings.HasPrefix(string(*rd.Hostname), "*") {
				v.errorf(f+".requestRedirect.hostname", "%q is not a precise hostname", *rd.Hostname)
			}
		}
		if p := rd.Path; p != nil {
			switch {
			case p.Type == gwv1.FullPathHTTPPathModifier && p.ReplaceFullPath == nil:
				v.errorf(f+".requestRedirect.path.replaceFullPath", "required when type is ReplaceFullPath")
			case p.Type == gwv1.PrefixMatchHTTPPathModifier && p.ReplacePrefixMatch == nil:
				v.errorf(f+".requestRedirect.path.replacePrefixMatch", "required when type is ReplacePrefixMatch")
			case p.Type != gwv1.FullPathHTTPPathModifier && p.Type != gwv1.PrefixMatchHTTPPathModifier:
				v.errorf(f+".requestRedirect.path.type", "%q is not one of ReplaceFullPath, ReplacePrefixMatch", p.Type)
			}
		}
	}
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
