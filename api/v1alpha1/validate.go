package v1alpha1

import (
	"fmt"
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
