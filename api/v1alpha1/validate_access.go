package v1alpha1

import (
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The Go twin of the AccessPolicy CRD's rules and of spec.access in DatabaseExposure and
// TenantGateway (TestValidationAgreesWithCRD runs both on one table of cases).

// MaxAccessRanges is how many ranges sourceRanges and deniedRanges hold each, at most.
const MaxAccessRanges = 256

// Default applies the CRD's defaults (AccessPolicy has none).
func (a *AccessPolicy) Default() {}

// Validate checks an AccessPolicy against the CRD's rules.
func (a *AccessPolicy) Validate() field.ErrorList {
	p := field.NewPath("spec")
	errs := targetRefs(p.Child("targetRefs"), len(a.Spec.TargetRefs), func(i int) (string, string, string, string) {
		r := a.Spec.TargetRefs[i]
		section := ""
		if r.SectionName != nil {
			section = string(*r.SectionName)
		}
		return string(r.Group), string(r.Kind), string(r.Name), section
	}, "gateway.networking.k8s.io", []string{"Gateway", "ListenerSet", "TLSRoute", "TCPRoute"},
		"targetRefs must name Gateways, ListenerSets, TLSRoutes or TCPRoutes (group gateway.networking.k8s.io)")
	sections := true
	for _, r := range a.Spec.TargetRefs {
		if r.SectionName != nil && r.Kind != "Gateway" && r.Kind != "ListenerSet" {
			sections = false
		}
	}
	if !sections {
		errs = append(errs, field.Invalid(p.Child("targetRefs"), len(a.Spec.TargetRefs), "sectionName names a listener: only with kind Gateway or ListenerSet"))
	}
	return append(errs, a.Spec.Access.validate(p)...)
}

// validate checks an Access at p (an AccessPolicy's spec, or a spec.access).
func (a *Access) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, cidrSet(p.Child("sourceRanges"), a.SourceRanges, "sourceRanges must be CIDRs")...)
	errs = append(errs, cidrSet(p.Child("deniedRanges"), a.DeniedRanges, "deniedRanges must be CIDRs")...)
	errs = append(errs, atLeastOne(p.Child("maxConnections"), a.MaxConnections)...)
	if c := a.PerClient; c != nil {
		cp := p.Child("perClient")
		errs = append(errs, atLeastOne(cp.Child("maxConnections"), c.MaxConnections)...)
		errs = append(errs, atLeastOne(cp.Child("connectionsPerMinute"), c.ConnectionsPerMinute)...)
		errs = append(errs, atLeastOne(cp.Child("burst"), c.Burst)...)
		if n := c.IPv6PrefixLength; n != nil && (*n < 1 || *n > 128) {
			errs = append(errs, field.Invalid(cp.Child("ipv6PrefixLength"), *n, "must be 1-128"))
		}
		if c.MaxConnections == nil && c.ConnectionsPerMinute == nil {
			errs = append(errs, field.Invalid(cp, "", "perClient needs maxConnections or connectionsPerMinute"))
		}
		if c.Burst != nil && c.ConnectionsPerMinute == nil {
			errs = append(errs, field.Invalid(cp, "", "burst needs connectionsPerMinute"))
		}
	}
	return errs
}

// cidrSet checks a list of CIDRs as the CRD does: at most MaxAccessRanges, each at most 43
// characters, no duplicates (listType set), and every one a CIDR (one error for the list,
// as the CEL rule gives).
func cidrSet(p *field.Path, vs []string, msg string) field.ErrorList {
	var errs field.ErrorList
	if len(vs) > MaxAccessRanges {
		errs = append(errs, field.TooMany(p, len(vs), MaxAccessRanges))
	}
	seen := map[string]bool{}
	cidr := true
	for i, v := range vs {
		if len(v) > 43 {
			errs = append(errs, field.TooLong(p.Index(i), v, 43))
		}
		if seen[v] {
			errs = append(errs, field.Duplicate(p.Index(i), v))
		}
		seen[v] = true
		if _, err := netip.ParsePrefix(v); err != nil {
			cidr = false
		}
	}
	if !cidr {
		errs = append(errs, field.Invalid(p, vs, msg))
	}
	return errs
}

// atLeastOne checks an optional limit's minimum of 1.
func atLeastOne(p *field.Path, v *int32) field.ErrorList {
	if v != nil && *v < 1 {
		return field.ErrorList{field.Invalid(p, *v, "must be at least 1")}
	}
	return nil
}
