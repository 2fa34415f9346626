package translate

import (
	"net/netip"
	"regexp"
	"strings"
)

// The Gateway API patterns for hostnames, section names and namespaces are checked by hand
// (isSubdomain, isLabel) rather than with regexp: with 100 000 route hostnames the regexp
// took 90 ms of every reload, more than the 50 ms in which a one-route change must apply
// (docs/performance.md, route scale). hostname_test.go holds the CRD patterns as regexps
// and checks both agree.

// kindRE is the Kind pattern.
var kindRE = regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)

// groupRE is the Group pattern ("" is the core group).
var groupRE = regexp.MustCompile(`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// protocolRE is the ProtocolType pattern.
var protocolRE = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9]+$`)

// controllerRE is the GatewayController pattern.
var controllerRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`)

// addressTypeRE is the AddressType pattern, anchored the way CEL evaluates it.
var addressTypeRE = regexp.MustCompile(`^Hostname|IPAddress|NamedAddress|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`)

// hostnameProblem returns why h is not a valid Gateway API Hostname, or "".
// noIP additionally rejects IP addresses (TLSRoute hostnames: RFC 6066 forbids IPs in SNI).
func hostnameProblem(h string, noIP bool) string {
	switch {
	case h == "":
		return "must not be empty"
	case len(h) > 253:
		return "must be at most 253 characters"
	case noIP && isIP(h):
		return "must not be an IP address"
	case strings.Contains(h, "*") && !strings.HasPrefix(h, "*."):
		return "a wildcard must be the whole first label (\"*.example.com\")"
	case !isSubdomain(strings.TrimPrefix(h, "*.")):
		return "must be a lower-case RFC 1123 hostname, optionally prefixed by \"*.\""
	}
	return ""
}

// isSubdomain reports whether s matches the SectionName pattern, which is also a Hostname
// without its wildcard: `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`,
// dot-separated RFC 1123 labels in lower case (no length limit per label).
func isSubdomain(s string) bool {
	for {
		label, rest, more := strings.Cut(s, ".")
		if !isLabel(label) {
			return false
		}
		if !more {
			return true
		}
		s = rest
	}
}

// isLabel reports whether s matches the Namespace pattern `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`.
func isLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// isIP reports whether s parses as an IP address. Only strings of digits and dots (IPv4) or
// with a colon (IPv6) can, so hostnames skip the parser.
func isIP(s string) bool {
	if strings.Trim(s, "0123456789.") != "" && !strings.Contains(s, ":") {
		return false
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isWildcard reports whether h is a wildcard hostname ("*.example.com").
func isWildcard(h string) bool { return strings.HasPrefix(h, "*.") }

// wildcardMatches reports whether the wildcard w ("*.example.com") matches the name n, which
// may itself be a wildcard: n must end in ".example.com" and have at least one label in front.
func wildcardMatches(w, n string) bool {
	suffix := w[1:] // ".example.com"
	return len(n) > len(suffix) && strings.HasSuffix(n, suffix)
}

// intersect returns the hostname a route hostname effectively serves on a listener with the
// given hostname ("" = any), and whether they intersect at all. The result is the more
// specific of the two:
//
//	listener ""               route "a.example.com"  -> "a.example.com"
//	listener "*.example.com"  route "a.example.com"  -> "a.example.com"
//	listener "a.example.com"  route "*.example.com"  -> "a.example.com"
//	listener "*.example.com"  route "*.com"          -> "*.example.com"
//	listener "*.example.com"  route "example.com"    -> no intersection
func intersect(listener, route string) (string, bool) {
	switch {
	case listener == "":
		return route, true
	case listener == route:
		return route, true
	case isWildcard(listener) && wildcardMatches(listener, route):
		return route, true
	case isWildcard(route) && wildcardMatches(route, listener):
		return listener, true
	}
	return "", false
}
