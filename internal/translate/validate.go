package translate

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

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
func validate(in *resources.Resources) []error {
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
	for _, r := range byName(in.TLSRoutes) {
		v.object(kindTLSRoute, r.Namespace, r.Name)
		v.parentRefs(r.Spec.ParentRefs)
		v.items("spec.hostnames", len(r.Spec.Hostnames), 1, 1024)
		for i, h := range r.Spec.Hostnames {
			if p := hostnameProblem(string(h), true); p != "" {
				v.errorf(fmt.Sprintf("spec.hostnames[%d]", i), "%q %s", h, p)
			}
		}
		v.items("spec.rules", len(r.Spec.Rules), 1, 1)
		for i, rule := range r.Spec.Rules {
			v.backendRefs(fmt.Sprintf("spec.rules[%d].backendRefs", i), rule.BackendRefs)
		}
	}
	for _, r := range byName(in.TCPRoutes) {
		v.object(kindTCPRoute, r.Namespace, r.Name)
		v.parentRefs(r.Spec.ParentRefs)
		v.items("spec.rules", len(r.Spec.Rules), 1, 1)
		for i, rule := range r.Spec.Rules {
			v.backendRefs(fmt.Sprintf("spec.rules[%d].backendRefs", i), rule.BackendRefs)
		}
	}
	for _, g := range byName(in.ReferenceGrants) {
		v.object("ReferenceGrant", g.Namespace, g.Name)
		v.items("spec.from", len(g.Spec.From), 1, 16)
		v.items("spec.to", len(g.Spec.To), 1, 16)
		for i, f := range g.Spec.From {
			field := fmt.Sprintf("spec.from[%d]", i)
			v.pattern(field+".group", string(f.Group), groupRE.MatchString(string(f.Group)), "group")
			v.kindField(field+".kind", string(f.Kind))
			v.pattern(field+".namespace", string(f.Namespace), namespaceRE.MatchString(string(f.Namespace)), "namespace")
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
		case !sectionNameRE.MatchString(string(l.Name)) || len(l.Name) > 253:
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
			v.pattern(rf+".namespace", string(*ref.Namespace), namespaceRE.MatchString(string(*ref.Namespace)), "namespace")
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
		f := fmt.Sprintf("spec.parentRefs[%d]", i)
		if r.Name == "" {
			v.errorf(f+".name", "required")
		}
		if r.Namespace != nil {
			v.pattern(f+".namespace", string(*r.Namespace), namespaceRE.MatchString(string(*r.Namespace)), "namespace")
		}
		if r.SectionName != nil {
			v.pattern(f+".sectionName", string(*r.SectionName), sectionNameRE.MatchString(string(*r.SectionName)), "section name")
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
	for i, r := range refs {
		f := fmt.Sprintf("%s[%d]", field, i)
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
			v.pattern(f+".namespace", string(*r.Namespace), namespaceRE.MatchString(string(*r.Namespace)), "namespace")
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
