package translate

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// certificates resolves a Terminate listener's certificateRefs and builds its *tls.Config.
// Any ref that does not resolve leaves the listener without configuration (fail closed):
// ResolvedRefs=False with the first failure's reason, every failure in the message.
func (t *translator) certificates(l *listener) {
	gwNS := l.ns // the Gateway's, or the ListenerSet's
	var refs []gwv1.SecretObjectReference
	if l.spec.TLS != nil {
		refs = l.spec.TLS.CertificateRefs
	}
	if len(refs) == 0 {
		l.refsReason = gwv1.ListenerReasonInvalidCertificateRef
		l.refsMsg = "a Terminate listener needs certificateRefs; tls.options alone configure no certificate"
		return
	}
	var certs []tls.Certificate
	var problems []string
	fail := func(reason gwv1.ListenerConditionReason, i int, format string, args ...any) {
		if l.refsReason == "" {
			l.refsReason = reason
		}
		problems = append(problems, fmt.Sprintf("certificateRefs[%d]: ", i)+fmt.Sprintf(format, args...))
	}
	for i, ref := range refs {
		group, kind, ns := "", kindSecret, gwNS
		if ref.Group != nil {
			group = string(*ref.Group)
		}
		if ref.Kind != nil {
			kind = string(*ref.Kind)
		}
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = string(*ref.Namespace)
		}
		id := ns + "/" + string(ref.Name)
		if group != "" || kind != kindSecret {
			fail(gwv1.ListenerReasonInvalidCertificateRef, i, "%s %s is not supported, only core Secrets", groupKind(group, kind), id)
			continue
		}
		if ns != gwNS && !t.granted(l.ownerKind(), gwNS, kindSecret, ns, string(ref.Name)) {
			fail(gwv1.ListenerReasonRefNotPermitted, i, "Secret %s is in another namespace and no ReferenceGrant in %s allows %ss from %s", id, ns, l.ownerKind(), gwNS)
			continue
		}
		s := t.secrets[nsName{ns, string(ref.Name)}]
		if s == nil {
			fail(gwv1.ListenerReasonInvalidCertificateRef, i, "Secret %s not found", id)
			continue
		}
		cert, err := keyPair(s)
		if err != nil {
			fail(gwv1.ListenerReasonInvalidCertificateRef, i, "Secret %s: %v", id, err)
			continue
		}
		certs = append(certs, cert)
	}
	if len(problems) > 0 {
		l.refsMsg = strings.Join(problems, "; ")
		return
	}
	l.tlsConfig = serverConfig(certs)
	if l.spec.Protocol == gwv1.HTTPSProtocolType {
		// Set before the config is ever used: HTTPS speaks HTTP/2 when the client offers it.
		l.tlsConfig.NextProtos = []string{"h2", "http/1.1"}
	}
}

// keyPair parses a kubernetes.io/tls Secret.
func keyPair(s *corev1.Secret) (tls.Certificate, error) {
	if s.Type != corev1.SecretTypeTLS {
		return tls.Certificate{}, fmt.Errorf("type is %q, want %q", s.Type, corev1.SecretTypeTLS)
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return tls.Certificate{}, fmt.Errorf("needs both %s and %s", corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	cert, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, err
		}
	}
	return cert, nil
}

// serverConfig builds the one *tls.Config of a Terminate listener. It is never modified
// afterwards (crypto/tls forbids changing a Config in use).
func serverConfig(certs []tls.Certificate) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: certs}
	if len(certs) > 1 {
		cfg.GetCertificate = selectCertificate(certs)
	}
	return cfg
}

// selectCertificate picks, among several certificates, the one whose name matches the SNI
// most specifically: an exact DNS name beats a wildcard, as the Gateway API asks ("the
// longest matching SNI"). crypto/tls on its own would take the first certificate that
// matches, so "*.example.com" listed first would shadow "a.example.com". Certificates the
// client cannot use (key type, signature schemes) are skipped.
func selectCertificate(certs []tls.Certificate) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		sni := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
		best, bestScore := -1, 0
		fallback, fallbackScore := 0, 0
		for i := range certs {
			score := nameScore(certs[i].Leaf, sni)
			if score > fallbackScore {
				fallback, fallbackScore = i, score
			}
			if score > bestScore && hello.SupportsCertificate(&certs[i]) == nil {
				best, bestScore = i, score
			}
		}
		if best < 0 {
			best = fallback
		}
		return &certs[best], nil
	}
}

// nameScore rates how well a certificate names sni: 2 exact, 1 wildcard, 0 not at all.
func nameScore(leaf *x509.Certificate, sni string) int {
	if leaf == nil || sni == "" {
		return 0
	}
	score := 0
	for _, n := range leaf.DNSNames {
		n = strings.ToLower(n)
		switch {
		case n == sni:
			return 2
		case strings.HasPrefix(n, "*.") && wildcardMatches(n, sni) && !strings.Contains(sni[:len(sni)-len(n)+1], "."):
			score = 1 // an X.509 wildcard covers exactly one label
		}
	}
	return score
}
