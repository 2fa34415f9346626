package translate

import (
	"net/netip"
	"regexp"
	"testing"
)

// The CRD patterns the hand-written checks in hostname.go stand for.
var (
	hostnameRE    = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	sectionNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	namespaceRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

var patternSeeds = []string{
	"", "a", "-", "a-", "-a", "a-b", "a--b", "a.b", "a..b", ".a", "a.", "*.a", "*.", "*", "**.a",
	"*.*.a", "a.*.b", "A", "a_b", "xn--bcher-kva.example", "h99999.scale.test", "*.w1.wild.test",
	"1.2.3.4", "1.2.3.4.5", "::1", "fe80::1%eth0", "0", "a.b-", "a.-b", "ä.example", "a b",
}

// isSubdomain, isLabel and hostnameProblem's pattern check agree with the CRD patterns.
func FuzzPatterns(f *testing.F) {
	for _, s := range patternSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isSubdomain(s), sectionNameRE.MatchString(s); got != want {
			t.Errorf("isSubdomain(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := isLabel(s), namespaceRE.MatchString(s); got != want {
			t.Errorf("isLabel(%q) = %v, the pattern says %v", s, got, want)
		}
		if len(s) > 0 && len(s) <= 253 {
			if got, want := hostnameProblem(s, false) == "", hostnameRE.MatchString(s); got != want {
				t.Errorf("hostnameProblem(%q) valid = %v, the pattern says %v", s, got, want)
			}
		}
		_, err := netip.ParseAddr(s)
		if got := isIP(s); got != (err == nil) {
			t.Errorf("isIP(%q) = %v, netip.ParseAddr says %v", s, got, err == nil)
		}
	})
}
