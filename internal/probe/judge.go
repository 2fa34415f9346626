package probe

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snigate/snigate/api/v1alpha1"
)

// Judge is the probe's verdict on a chain a server presented (leaf first): whether a client
// that checks hostnames, and, when roots is not nil, verifies the chain against roots, accepts
// it at now. It does no I/O; Probe calls it with what it read.
func Judge(chain []*x509.Certificate, hostnames []string, roots *x509.CertPool, now time.Time) Result {
	if len(chain) == 0 {
		return Result{Reason: v1alpha1.ReasonUnreachable, Message: "the server presented no certificate"}
	}
	in := &input{leaf: chain[0], chain: chain, hostnames: normalize(hostnames), roots: roots, now: now}
	if roots != nil {
		in.timeErr, in.authErr = verifyChain(chain, roots, now)
	}
	for _, h := range in.hostnames {
		if in.leaf.VerifyHostname(h) != nil {
			in.missing = append(in.missing, h)
		}
	}
	r := Result{Certificate: describe(in), Chain: chain}
	for _, p := range policies {
		if reason, message, failed := p(in); failed {
			r.Reason, r.Message = reason, message
			return r
		}
	}
	r.Reason, r.Message = v1alpha1.ReasonVerified, verified(in)
	return r
}

// input is what the policies judge.
type input struct {
	leaf      *x509.Certificate
	chain     []*x509.Certificate
	hostnames []string
	roots     *x509.CertPool
	now       time.Time
	// timeErr: the chain verifies against roots, but not at now (a certificate in it is
	// expired or not yet valid). authErr: it does not verify at any time. Both nil: it
	// verifies, or roots is nil.
	timeErr, authErr error
	// missing are the hostnames the leaf does not name.
	missing []string
}

// A policy is one check; the first that fails gives the verdict (cert-manager's
// policies.Chain does the same).
type policy func(in *input) (reason, message string, failed bool)

// policies in the order their verdicts win: a certificate that is expired is reported as
// expired even if it also lacks a name, since renewing is the first thing to do.
var policies = []policy{leafValidity, chainValidity, chainsToTrustAnchor, coversHostnames}

func leafValidity(in *input) (string, string, bool) {
	switch l := in.leaf; {
	case in.now.Before(l.NotBefore):
		return v1alpha1.ReasonNotYetValid, fmt.Sprintf("the certificate (serial %s) is valid only from %s, and it is %s now: check the clocks of its issuer and of this controller, or wait",
			serialHex(l.SerialNumber), stamp(l.NotBefore), stamp(in.now)), true
	case in.now.After(l.NotAfter):
		return v1alpha1.ReasonExpired, fmt.Sprintf("the certificate (serial %s) expired at %s: renew it and have the server load the new one; clients refuse an expired certificate",
			serialHex(l.SerialNumber), stamp(l.NotAfter)), true
	}
	return "", "", false
}

// chainValidity catches an intermediate or the trust anchor itself out of its validity: the
// leaf's own dates were leafValidity's.
func chainValidity(in *input) (string, string, bool) {
	var inv x509.CertificateInvalidError
	if !errors.As(in.timeErr, &inv) || inv.Cert == nil {
		return "", "", false
	}
	c := inv.Cert
	if in.now.Before(c.NotBefore) {
		return v1alpha1.ReasonNotYetValid, fmt.Sprintf("the CA certificate %q on the way to the trust anchor is valid only from %s: serve a chain through a CA certificate that is valid now",
			c.Subject.String(), stamp(c.NotBefore)), true
	}
	return v1alpha1.ReasonExpired, fmt.Sprintf("the CA certificate %q on the way to the trust anchor expired at %s: renew it, or serve a chain through a current one",
		c.Subject.String(), stamp(c.NotAfter)), true
}

func chainsToTrustAnchor(in *input) (string, string, bool) {
	if in.authErr == nil {
		return "", "", false
	}
	issuer := in.leaf.Issuer.String()
	var ua x509.UnknownAuthorityError
	var inv x509.CertificateInvalidError
	switch {
	case errors.As(in.authErr, &ua):
		msg := fmt.Sprintf("the certificate, issued by %q, does not chain to the trust anchor", issuer)
		if len(in.chain) == 1 && !selfIssued(in.leaf) {
			msg += fmt.Sprintf("; the server sent no intermediate certificate: if %q is an intermediate CA, the server must send it after its own certificate; otherwise serve a certificate that the trust anchor's CA issued, or update the TrustAnchor", issuer)
		} else {
			msg += "; serve a certificate that the trust anchor's CA issued, or update the TrustAnchor"
		}
		return v1alpha1.ReasonUnknownAuthority, msg, true
	case errors.As(in.authErr, &inv) && inv.Reason == x509.IncompatibleUsage:
		return v1alpha1.ReasonUnknownAuthority, fmt.Sprintf("the chain to the trust anchor does not allow server authentication (its extended key usage): issue the certificate, and any intermediate that restricts usage, for serverAuth (%v)", in.authErr), true
	}
	return v1alpha1.ReasonUnknownAuthority, fmt.Sprintf("the certificate, issued by %q, does not verify against the trust anchor: %v", issuer, in.authErr), true
}

func coversHostnames(in *input) (string, string, bool) {
	if len(in.missing) == 0 {
		return "", "", false
	}
	names := certNames(in.leaf)
	var has string
	switch {
	case len(names) > 0:
		has = fmt.Sprintf("the certificate names [%s]", strings.Join(names, " "))
	case in.leaf.Subject.CommonName != "":
		has = fmt.Sprintf("the certificate names no DNS names (its common name %q does not count: clients match only subjectAltName)", in.leaf.Subject.CommonName)
	default:
		has = "the certificate names no DNS names"
	}
	return v1alpha1.ReasonMissingDNSNames, fmt.Sprintf("%s; add %s", has, strings.Join(in.missing, ", ")), true
}

func verified(in *input) string {
	msg := fmt.Sprintf("the certificate (serial %s) is valid until %s", serialHex(in.leaf.SerialNumber), stamp(in.leaf.NotAfter))
	if len(in.hostnames) > 0 {
		msg = fmt.Sprintf("the certificate (serial %s) names %s and is valid until %s", serialHex(in.leaf.SerialNumber), strings.Join(in.hostnames, ", "), stamp(in.leaf.NotAfter))
	}
	if in.roots != nil {
		return msg + "; its chain leads to the trust anchor"
	}
	return msg + "; its chain was not checked (no trust anchor)"
}

// verifyChain verifies the served chain against roots for server authentication, as a
// client does but without a hostname (coversHostnames checks those, all of them). A chain
// that fails only on dates is verified again at the middle of the leaf's validity, so that
// ChainsToTrustAnchor reports the signatures while Expired or NotYetValid reports the dates.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (timeErr, authErr error) {
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), CurrentTime: now}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	leaf := chain[0]
	_, err := leaf.Verify(opts)
	if err == nil {
		return nil, nil
	}
	if !isTimeError(err) {
		return nil, err
	}
	opts.CurrentTime = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	if _, err2 := leaf.Verify(opts); err2 != nil && !isTimeError(err2) {
		return err, err2
	}
	// Still a date problem at the leaf's midpoint (an intermediate with a shorter life):
	// the path exists, the dates are what is wrong.
	return err, nil
}

func isTimeError(err error) bool {
	var inv x509.CertificateInvalidError
	return errors.As(err, &inv) && inv.Reason == x509.Expired
}

// describe is status.serverCertificate for the leaf.
func describe(in *input) *v1alpha1.ServerCertificate {
	l := in.leaf
	sum := sha256.Sum256(l.Raw)
	c := &v1alpha1.ServerCertificate{
		Serial:          serialHex(l.SerialNumber),
		SHA256:          hex.EncodeToString(sum[:]),
		NotBefore:       metav1.NewTime(l.NotBefore),
		NotAfter:        metav1.NewTime(l.NotAfter),
		DNSNames:        slices.Clone(l.DNSNames),
		Issuer:          l.Issuer.String(),
		CoversHostnames: len(in.missing) == 0,
	}
	if in.roots != nil {
		chains := in.authErr == nil
		c.ChainsToTrustAnchor = &chains
	}
	return c
}

// normalize drops empty and repeated hostnames (case and a trailing dot do not make a name
// different) and keeps the order.
func normalize(hostnames []string) []string {
	var out []string
	for _, h := range hostnames {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// certNames are the leaf's DNS and IP subject alternative names.
func certNames(c *x509.Certificate) []string {
	names := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return names
}

func selfIssued(c *x509.Certificate) bool { return string(c.RawIssuer) == string(c.RawSubject) }

// serialHex formats a serial as openssl x509 -serial prints it (upper-case hex, even
// length), so that it can be compared with what an operator sees.
func serialHex(s *big.Int) string {
	if s == nil {
		return ""
	}
	sign, abs := "", s
	if s.Sign() < 0 {
		sign, abs = "-", new(big.Int).Neg(s)
	}
	h := strings.ToUpper(abs.Text(16))
	if len(h)%2 == 1 {
		h = "0" + h
	}
	return sign + h
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
