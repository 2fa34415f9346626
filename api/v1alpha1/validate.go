package v1alpha1

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The Go twin of the CRD's schema and CEL rules, for standalone mode where no API server
// checks the files. Each rule below carries the CRD's message; TestValidationAgreesWithCRD
// runs one table of cases through the real API server and through these functions and fails
// when they disagree. Rules CEL cannot afford (hostname overlap between entries, the
// assembled listener total) are the render stage's, not here.

var (
	labelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dns1035RE   = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	hostnameRE  = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// Default applies the CRD's defaults, as the API server does on create.
func (t *TenantGateway) Default() {
	if t.Spec.GatewayClassName == "" {
		t.Spec.GatewayClassName = "snigate"
	}
	if t.Spec.Certificates.Mode == "" {
		t.Spec.Certificates.Mode = CertificatesHTTP01
	}
	if t.Spec.DatabaseHostnames == "" {
		t.Spec.DatabaseHostnames = DatabaseHostnamesBoth
	}
}

// Validate checks a defaulted TenantGateway against the CRD's rules.
func (t *TenantGateway) Validate() field.ErrorList {
	var errs field.ErrorList
	s := &t.Spec
	p := field.NewPath("spec")
	errs = append(errs, pattern(p.Child("apex"), s.Apex, 253, subdomainRE)...)
	if n := len(s.GatewayClassName); n == 0 || n > 253 {
		errs = append(errs, field.Invalid(p.Child("gatewayClassName"), s.GatewayClassName, "must be 1-253 characters"))
	}
	if r := s.ParentGatewayRef; r != nil {
		rp := p.Child("parentGatewayRef")
		errs = append(errs, pattern(rp.Child("namespace"), r.Namespace, 63, labelRE)...)
		if n := len(r.Name); n == 0 || n > 253 {
			errs = append(errs, field.Invalid(rp.Child("name"), r.Name, "must be 1-253 characters"))
		}
	}
	errs = append(errs, s.Certificates.validate(p.Child("certificates"))...)
	switch s.DatabaseHostnames {
	case DatabaseHostnamesSubdomain, DatabaseHostnamesFlat, DatabaseHostnamesBoth:
	default:
		errs = append(errs, field.NotSupported(p.Child("databaseHostnames"), s.DatabaseHostnames, []string{"subdomain", "flat", "both"}))
	}

	errs = append(errs, set(p.Child("tlsPassthroughServices"), s.TLSPassthroughServices, 59)...)
	errs = append(errs, set(p.Child("attachedNamespaces"), s.AttachedNamespaces, 63)...)

	lp := p.Child("tlsPassthroughListeners")
	if len(s.TLSPassthroughListeners) > 64 {
		errs = append(errs, field.TooMany(lp, len(s.TLSPassthroughListeners), 64))
	}
	names := map[string]bool{}
	ports := map[int32]int{}
	for i, l := range s.TLSPassthroughListeners {
		ip := lp.Index(i)
		errs = append(errs, pattern(ip.Child("name"), l.Name, 59, labelRE)...)
		if names[l.Name] {
			// At the entry, like the API server's list-map key check.
			errs = append(errs, field.Duplicate(ip, map[string]string{"name": l.Name}))
		}
		names[l.Name] = true
		switch {
		case l.Port < 1 || l.Port > 65535:
			errs = append(errs, field.Invalid(ip.Child("port"), l.Port, "must be 1-65535"))
		case l.Port == 80 || l.Port == 443:
			errs = append(errs, field.Invalid(ip.Child("port"), l.Port, "ports 80 and 443 are the gateway's http and https ports"))
		}
		ports[l.Port]++
		errs = append(errs, pattern(ip.Child("hostname"), l.Hostname, 253, hostnameRE)...)
	}
	var clash, shared, outside []string
	for _, l := range s.TLSPassthroughListeners {
		for _, svc := range s.TLSPassthroughServices {
			if l.Name == svc {
				clash = append(clash, l.Name)
			}
		}
		if ports[l.Port] > 1 {
			shared = append(shared, fmt.Sprintf("%s (%d)", l.Name, l.Port))
		}
		if l.Hostname != s.Apex && !strings.HasSuffix(l.Hostname, "."+s.Apex) {
			outside = append(outside, l.Hostname)
		}
	}
	if len(clash) > 0 {
		errs = append(errs, field.Invalid(lp, strings.Join(clash, ", "), "tlsPassthroughListeners[].name must differ from every tlsPassthroughServices entry: both render a listener named tls-<name>"))
	}
	if len(shared) > 0 {
		errs = append(errs, field.Invalid(lp, strings.Join(shared, ", "), "tlsPassthroughListeners[].port must be unique"))
	}
	if len(outside) > 0 {
		errs = append(errs, field.Invalid(lp, strings.Join(outside, ", "), "tlsPassthroughListeners[].hostname must be the apex or a name under it"))
	}
	if s.Access != nil {
		errs = append(errs, s.Access.validate(p.Child("access"))...)
	}
	return errs
}

func (c *Certificates) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch c.Mode {
	case CertificatesHTTP01, CertificatesDNS01, CertificatesExistingSecret:
	default:
		errs = append(errs, field.NotSupported(p.Child("mode"), c.Mode, []string{"http01", "dns01", "existingSecret"}))
	}
	if c.Mode == CertificatesExistingSecret && c.WildcardSecretRef == nil {
		errs = append(errs, field.Required(p.Child("wildcardSecretRef"), "wildcardSecretRef is required with mode existingSecret"))
	}
	if c.WildcardSecretRef != nil && (len(c.WildcardSecretRef.Name) == 0 || len(c.WildcardSecretRef.Name) > 253) {
		errs = append(errs, field.Invalid(p.Child("wildcardSecretRef", "name"), c.WildcardSecretRef.Name, "must be 1-253 characters"))
	}
	if c.WildcardSecretRef != nil && c.WildcardSecretRef.Namespace != "" {
		errs = append(errs, pattern(p.Child("wildcardSecretRef", "namespace"), c.WildcardSecretRef.Namespace, 63, labelRE)...)
	}
	if c.Mode == CertificatesDNS01 && c.DNS01 == nil && c.IssuerRef == nil {
		errs = append(errs, field.Required(p.Child("dns01"), "mode dns01 needs dns01 (a solver) or issuerRef (an issuer that has one)"))
	}
	if c.ACME != nil && c.IssuerRef != nil {
		errs = append(errs, field.Invalid(p.Child("acme"), c.ACME.Server, "acme and issuerRef are exclusive: acme renders an Issuer, issuerRef names one"))
	}
	if c.ACME != nil && !strings.HasPrefix(c.ACME.Server, "https://") {
		errs = append(errs, field.Invalid(p.Child("acme", "server"), c.ACME.Server, "must be an https:// URL"))
	}
	return errs
}

// pattern checks a required string's length and pattern.
func pattern(p *field.Path, v string, max int, re *regexp.Regexp) field.ErrorList {
	switch {
	case v == "":
		return field.ErrorList{field.Required(p, "")}
	case len(v) > max:
		return field.ErrorList{field.TooLong(p, v, max)}
	case !re.MatchString(v):
		return field.ErrorList{field.Invalid(p, v, "must match "+re.String())}
	}
	return nil
}

// set checks a list of DNS-1123 labels without duplicates, at most 64.
func set(p *field.Path, vs []string, max int) field.ErrorList {
	var errs field.ErrorList
	if len(vs) > 64 {
		errs = append(errs, field.TooMany(p, len(vs), 64))
	}
	seen := map[string]bool{}
	for i, v := range vs {
		errs = append(errs, pattern(p.Index(i), v, max, labelRE)...)
		if seen[v] {
			errs = append(errs, field.Duplicate(p.Index(i), v))
		}
		seen[v] = true
	}
	return errs
}

// Engines lists every DatabaseExposure engine, as the CRD's enum does.
var Engines = []Engine{EnginePostgres, EngineRedis, EngineValkey, EngineMongoDB, EngineNATS, EngineKafka,
	EngineClickHouse, EngineRabbitMQ, EngineOpenSearch, EngineMariaDB, EngineMySQL, EngineCustom}

// Default applies the CRD's defaults, as the API server does on create.
func (d *DatabaseExposure) Default() {
	if d.Spec.TLS.Enabled == nil {
		enabled := true
		d.Spec.TLS.Enabled = &enabled
	}
}

// Validate checks a defaulted DatabaseExposure against the CRD's rules.
func (d *DatabaseExposure) Validate() field.ErrorList {
	var errs field.ErrorList
	s := &d.Spec
	p := field.NewPath("spec")
	if !slices.Contains(Engines, s.Engine) {
		names := make([]string, len(Engines))
		for i, e := range Engines {
			names[i] = string(e)
		}
		errs = append(errs, field.NotSupported(p.Child("engine"), s.Engine, names))
	}
	if s.Release != "" {
		errs = append(errs, pattern(p.Child("release"), s.Release, 63, dns1035RE)...)
	}
	errs = append(errs, pattern(p.Child("backendRef", "name"), s.BackendRef.Name, 63, dns1035RE)...)
	if s.BackendRef.Port < 1 || s.BackendRef.Port > 65535 {
		errs = append(errs, field.Invalid(p.Child("backendRef", "port"), s.BackendRef.Port, "must be 1-65535"))
	}
	if s.TLS.Enabled != nil && !*s.TLS.Enabled {
		errs = append(errs, field.Invalid(p.Child("tls", "enabled"), false, "an external database must speak TLS: tls.enabled cannot be false (snigate routes databases by the SNI of their TLS ClientHello and never carries plaintext to them)"))
	}
	if s.Port != nil {
		switch port := *s.Port; {
		case port < 1 || port > 65535:
			errs = append(errs, field.Invalid(p.Child("port"), port, "must be 1-65535"))
		case port == 80 || port == 443:
			errs = append(errs, field.Invalid(p.Child("port"), port, "ports 80 and 443 are the gateway's http and https ports"))
		}
	} else if s.Engine == EngineCustom {
		errs = append(errs, field.Required(p.Child("port"), "engine custom has no native port: set port"))
	}
	if r := s.TrustAnchorRef; r != nil && (len(r.Name) == 0 || len(r.Name) > 253) {
		errs = append(errs, field.Invalid(p.Child("trustAnchorRef", "name"), r.Name, "must be 1-253 characters"))
	}
	if r := s.TenantGatewayRef; r != nil {
		if len(r.Name) == 0 || len(r.Name) > 253 {
			errs = append(errs, field.Invalid(p.Child("tenantGatewayRef", "name"), r.Name, "must be 1-253 characters"))
		}
		if len(r.Namespace) > 63 {
			errs = append(errs, field.TooLong(p.Child("tenantGatewayRef", "namespace"), r.Namespace, 63))
		}
	}
	if s.Access != nil {
		errs = append(errs, s.Access.validate(p.Child("access"))...)
	}
	mp := p.Child("members")
	if len(s.Members) > 128 {
		errs = append(errs, field.TooMany(mp, len(s.Members), 128))
	}
	members := map[string]bool{}
	for i, m := range s.Members {
		ip := mp.Index(i)
		errs = append(errs, pattern(ip.Child("name"), m.Name, 63, dns1035RE)...)
		if members[m.Name] {
			// At the entry, like the API server's list-map key check.
			errs = append(errs, field.Duplicate(ip, map[string]string{"name": m.Name}))
		}
		members[m.Name] = true
		errs = append(errs, pattern(ip.Child("backendRef", "name"), m.BackendRef.Name, 63, dns1035RE)...)
		if m.BackendRef.Port < 1 || m.BackendRef.Port > 65535 {
			errs = append(errs, field.Invalid(ip.Child("backendRef", "port"), m.BackendRef.Port, "must be 1-65535"))
		}
	}
	return errs
}

// Default applies the CRD's defaults, as the API server does on create.
func (a *TrustAnchor) Default() {
	if a.Spec.SourceSecretRef.Key == "" {
		a.Spec.SourceSecretRef.Key = "ca.crt"
	}
}

// Validate checks a defaulted TrustAnchor against the CRD's rules.
func (a *TrustAnchor) Validate() field.ErrorList {
	var errs field.ErrorList
	s := &a.Spec
	p := field.NewPath("spec")
	if s.Release != "" {
		errs = append(errs, pattern(p.Child("release"), s.Release, 63, dns1035RE)...)
	}
	if s.SourceSecretRef.Name == "" {
		errs = append(errs, field.Required(p.Child("sourceSecretRef"), "the Secret holding the CA certificates"))
	} else if n := len(s.SourceSecretRef.Name); n > 253 {
		errs = append(errs, field.Invalid(p.Child("sourceSecretRef", "name"), s.SourceSecretRef.Name, "must be 1-253 characters"))
	}
	if n := len(s.SourceSecretRef.Key); n == 0 || n > 253 {
		errs = append(errs, field.Invalid(p.Child("sourceSecretRef", "key"), s.SourceSecretRef.Key, "must be 1-253 characters"))
	}
	if len(s.Readers) > 32 {
		errs = append(errs, field.TooMany(p.Child("readers"), len(s.Readers), 32))
	}
	for i, r := range s.Readers {
		if r.Kind == "" {
			errs = append(errs, field.Required(p.Child("readers").Index(i).Child("kind"), ""))
		}
		if r.Name == "" {
			errs = append(errs, field.Required(p.Child("readers").Index(i).Child("name"), ""))
		}
	}
	return errs
}

// Default applies the CRD's defaults (BackendPolicy has none).
func (b *BackendPolicy) Default() {}

// Validate checks a BackendPolicy against the CRD's rules.
func (b *BackendPolicy) Validate() field.ErrorList {
	p := field.NewPath("spec")
	errs := targetRefs(p.Child("targetRefs"), len(b.Spec.TargetRefs), func(i int) (string, string, string, string) {
		r := b.Spec.TargetRefs[i]
		return string(r.Group), string(r.Kind), string(r.Name), ""
	}, "", []string{"Service"}, `targetRefs must name Services (group "", kind Service)`)
	if pp := b.Spec.ProxyProtocol; pp != nil {
		pq := p.Child("proxyProtocol")
		switch pp.Version {
		case ProxyProtocolV1, ProxyProtocolV2:
		default:
			errs = append(errs, field.NotSupported(pq.Child("version"), pp.Version, []string{"v1", "v2"}))
		}
		if len(pp.TLVs) > 2 {
			errs = append(errs, field.TooMany(pq.Child("tlvs"), len(pp.TLVs), 2))
		}
		seen := map[ProxyProtocolTLV]bool{}
		for i, tlv := range pp.TLVs {
			switch tlv {
			case TLVAuthority, TLVALPN:
			default:
				errs = append(errs, field.NotSupported(pq.Child("tlvs").Index(i), tlv, []string{"authority", "alpn"}))
			}
			if seen[tlv] {
				errs = append(errs, field.Duplicate(pq.Child("tlvs").Index(i), tlv))
			}
			seen[tlv] = true
		}
		if len(pp.TLVs) > 0 && pp.Version != ProxyProtocolV2 {
			errs = append(errs, field.Invalid(pq, pp.Version, "tlvs need version v2"))
		}
	}
	return errs
}

// Default applies the CRD's defaults (ListenerPolicy has none).
func (l *ListenerPolicy) Default() {}

// Validate checks a ListenerPolicy against the CRD's rules.
func (l *ListenerPolicy) Validate() field.ErrorList {
	p := field.NewPath("spec")
	errs := targetRefs(p.Child("targetRefs"), len(l.Spec.TargetRefs), func(i int) (string, string, string, string) {
		r := l.Spec.TargetRefs[i]
		section := ""
		if r.SectionName != nil {
			section = string(*r.SectionName)
		}
		return string(r.Group), string(r.Kind), string(r.Name), section
	}, "gateway.networking.k8s.io", []string{"Gateway"}, "targetRefs must name Gateways (group gateway.networking.k8s.io, kind Gateway)")
	if pp := l.Spec.ProxyProtocol; pp != nil {
		rp := p.Child("proxyProtocol", "trustedRanges")
		switch n := len(pp.TrustedRanges); {
		case n == 0:
			errs = append(errs, field.Required(rp, "the load balancers' addresses"))
		case n > 64:
			errs = append(errs, field.TooMany(rp, n, 64))
		}
		seen := map[string]bool{}
		cidr := true
		for i, r := range pp.TrustedRanges {
			if len(r) > 43 {
				errs = append(errs, field.TooLong(rp.Index(i), r, 43))
			}
			if seen[r] {
				errs = append(errs, field.Duplicate(rp.Index(i), r))
			}
			seen[r] = true
			if _, err := netip.ParsePrefix(r); err != nil {
				cidr = false
			}
		}
		if !cidr {
			errs = append(errs, field.Invalid(rp, pp.TrustedRanges, "trustedRanges must be CIDRs"))
		}
	}
	return errs
}

// sectionNameRE is Gateway API's SectionName pattern.
var sectionNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// targetRefs checks a policy's targetRefs: 1 to 16 of them, every one of group and one of kinds, as
// the CRD's rule does, and Gateway API's own rules on each name and section name.
func targetRefs(p *field.Path, n int, ref func(int) (group, kind, name, section string), group string, kinds []string, msg string) field.ErrorList {
	var errs field.ErrorList
	switch {
	case n == 0:
		errs = append(errs, field.Required(p, "the objects the policy applies to"))
	case n > 16:
		errs = append(errs, field.TooMany(p, n, 16))
	}
	all := true
	for i := range n {
		g, k, name, section := ref(i)
		if g != group || !slices.Contains(kinds, k) {
			all = false
		}
		if len(name) == 0 || len(name) > 253 {
			errs = append(errs, field.Invalid(p.Index(i).Child("name"), name, "must be 1-253 characters"))
		}
		if section != "" && (len(section) > 253 || !sectionNameRE.MatchString(section)) {
			errs = append(errs, field.Invalid(p.Index(i).Child("sectionName"), section, "must be a DNS subdomain"))
		}
	}
	if !all {
		errs = append(errs, field.Invalid(p, n, msg))
	}
	return errs
}
